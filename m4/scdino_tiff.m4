# SCDINO_CHECK_TIFF: libtiff is required (pkg-config libtiff-4, else -ltiff).
AC_DEFUN([SCDINO_CHECK_TIFF], [
  PKG_CHECK_MODULES([TIFF], [libtiff-4],
    [scdino_tiff_summary="yes, `$PKG_CONFIG --modversion libtiff-4` (pkg-config)"],
    [AC_CHECK_LIB([tiff], [TIFFOpen], [TIFF_LIBS="-ltiff"; scdino_tiff_summary="yes (-ltiff)"],
       [AC_MSG_ERROR([libtiff not found. Install it (Debian: apt-get install libtiff-dev) or set TIFF_CFLAGS/TIFF_LIBS])])])
])
