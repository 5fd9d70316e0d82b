# SCDINO_CHECK_BLAS: a BLAS with the CBLAS interface (OpenBLAS preferred) for the CPU backend.
AC_DEFUN([SCDINO_CHECK_BLAS], [
  AC_ARG_VAR([BLAS_CFLAGS], [C preprocessor flags for CBLAS])
  AC_ARG_VAR([BLAS_LIBS], [linker flags for a BLAS with the CBLAS interface])
  AS_IF([test -z "$BLAS_LIBS"], [
    PKG_CHECK_MODULES([BLAS], [openblas], [scdino_blas_how="pkg-config openblas"],
      [BLAS_LIBS="-lopenblas"; scdino_blas_how="-lopenblas"])],
    [scdino_blas_how="environment"])
  save_CPPFLAGS="$CPPFLAGS"; save_LIBS="$LIBS"
  CPPFLAGS="$CPPFLAGS $BLAS_CFLAGS"; LIBS="$BLAS_LIBS $LIBS"
  AC_MSG_CHECKING([for cblas_sgemm])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cblas.h>]],
      [[float a = 1, b = 1, c = 0; cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([no BLAS with the CBLAS interface found. Install OpenBLAS (Debian: apt-get install libopenblas-dev) or set BLAS_CFLAGS/BLAS_LIBS])])
  AC_CHECK_FUNCS([openblas_get_config openblas_set_num_threads])
  CPPFLAGS="$save_CPPFLAGS"; LIBS="$save_LIBS"
  scdino_blas_summary="yes ($scdino_blas_how)"
])
