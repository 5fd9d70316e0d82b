# SCDINO_CHECK_CUDNN: optional cuDNN (fused attention).  Needs CUDA.
AC_DEFUN([SCDINO_CHECK_CUDNN], [
  AC_ARG_WITH([cudnn],
    [AS_HELP_STRING([--with-cudnn@<:@=DIR@:>@], [use cuDNN for fused attention (default: if found; needs CUDA)])],
    [], [with_cudnn=guess])
  have_cudnn=no
  AS_IF([test "x$with_cudnn" != xno && test "x$have_cuda" = xyes], [
    CUDNN_CFLAGS=""; CUDNN_LDFLAGS=""
    AS_IF([test "x$with_cudnn" != xguess && test "x$with_cudnn" != xyes], [
      CUDNN_CFLAGS="-isystem $with_cudnn/include"; CUDNN_LDFLAGS="-L$with_cudnn/lib -L$with_cudnn/lib64 -Wl,-rpath,$with_cudnn/lib64"])
    save_CPPFLAGS="$CPPFLAGS"; save_LIBS="$LIBS"; save_LDFLAGS="$LDFLAGS"
    CPPFLAGS="$CPPFLAGS $CUDA_CFLAGS $CUDNN_CFLAGS"; LDFLAGS="$LDFLAGS $CUDA_LDFLAGS $CUDNN_LDFLAGS"
    have_cudnn=yes
    AC_CHECK_HEADER([cudnn.h], [], [have_cudnn=no])
    AS_IF([test "x$have_cudnn" = xyes], [AC_CHECK_LIB([cudnn], [cudnnCreate], [], [have_cudnn=no], [-lcudart])])
    AS_IF([test "x$have_cudnn" = xyes], [
      AC_COMPUTE_INT([scdino_cudnn_major], [CUDNN_MAJOR], [[#include <cudnn_version.h>]])
      AC_COMPUTE_INT([scdino_cudnn_minor], [CUDNN_MINOR], [[#include <cudnn_version.h>]])
      AC_COMPUTE_INT([scdino_cudnn_patch], [CUDNN_PATCHLEVEL], [[#include <cudnn_version.h>]])
      AS_IF([test "$scdino_cudnn_major" -lt 9], [have_cudnn=no; AC_MSG_WARN([cuDNN $scdino_cudnn_major found; 9 or later is needed])])])
    CPPFLAGS="$save_CPPFLAGS"; LIBS="$save_LIBS"; LDFLAGS="$save_LDFLAGS"])
  AS_IF([test "x$have_cudnn" = xno && test "x$with_cudnn" != xguess && test "x$with_cudnn" != xno],
    [AC_MSG_ERROR([cuDNN was requested but is not usable (it needs --with-cuda); see config.log])])
  AS_IF([test "x$have_cudnn" = xyes],
    [CUDNN_LIBS="-lcudnn"; AC_DEFINE([HAVE_CUDNN], [1], [cuDNN is available])
     scdino_cudnn_summary="yes, $scdino_cudnn_major.$scdino_cudnn_minor.$scdino_cudnn_patch"],
    [CUDNN_CFLAGS=""; CUDNN_LDFLAGS=""; CUDNN_LIBS=""; scdino_cudnn_summary="no"])
  AC_SUBST([CUDNN_CFLAGS])
  AC_SUBST([CUDNN_LDFLAGS])
  AC_SUBST([CUDNN_LIBS])
  AM_CONDITIONAL([HAVE_CUDNN], [test "x$have_cudnn" = xyes])
])
