# SCDINO_CHECK_PNG: libpng for attention-map images (required).
AC_DEFUN([SCDINO_CHECK_PNG], [
  PKG_CHECK_MODULES([PNG], [libpng],
    [scdino_png_summary="yes, `$PKG_CONFIG --modversion libpng` (pkg-config)"],
    [AC_CHECK_LIB([png], [png_create_write_struct], [PNG_LIBS="-lpng"; scdino_png_summary="yes (-lpng)"],
       [AC_MSG_ERROR([libpng not found. Install it (Debian: apt-get install libpng-dev)])])])
])
