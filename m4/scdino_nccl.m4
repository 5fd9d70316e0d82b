# SCDINO_CHECK_NCCL: optional NCCL for the GPU gradient all-reduce.  Needs CUDA.
AC_DEFUN([SCDINO_CHECK_NCCL], [
  AC_ARG_WITH([nccl],
    [AS_HELP_STRING([--with-nccl@<:@=DIR@:>@], [use NCCL for GPU collectives (default: if found; needs CUDA)])],
    [], [with_nccl=guess])
  have_nccl=no
  AS_IF([test "x$with_nccl" != xno && test "x$have_cuda" = xyes], [
    NCCL_CFLAGS=""; NCCL_LDFLAGS=""
    AS_IF([test "x$with_nccl" != xguess && test "x$with_nccl" != xyes], [
      AS_IF([test -d "$with_nccl"], [], [AC_MSG_ERROR([--with-nccl=$with_nccl: no such directory])])
      NCCL_CFLAGS="-isystem $with_nccl/include"; NCCL_LDFLAGS="-L$with_nccl/lib -Wl,-rpath,$with_nccl/lib"])
    save_CPPFLAGS="$CPPFLAGS"; save_LIBS="$LIBS"; save_LDFLAGS="$LDFLAGS"
    CPPFLAGS="$CPPFLAGS $CUDA_CFLAGS $NCCL_CFLAGS"; LDFLAGS="$LDFLAGS $CUDA_LDFLAGS $NCCL_LDFLAGS"
    have_nccl=yes
    AC_CHECK_HEADER([nccl.h], [], [have_nccl=no])
    AS_IF([test "x$have_nccl" = xyes], [AC_CHECK_LIB([nccl], [ncclCommInitRank], [], [have_nccl=no], [-lcudart])])
    AS_IF([test "x$have_nccl" = xyes], [
      AC_COMPUTE_INT([scdino_nccl_code], [NCCL_VERSION_CODE], [[#include <nccl.h>]])])
    CPPFLAGS="$save_CPPFLAGS"; LIBS="$save_LIBS"; LDFLAGS="$save_LDFLAGS"])
  AS_IF([test "x$have_nccl" = xno && test "x$with_nccl" != xguess && test "x$with_nccl" != xno],
    [AC_MSG_ERROR([NCCL was requested but is not usable (it needs --with-cuda); see config.log])])
  AS_IF([test "x$have_nccl" = xyes],
    [NCCL_LIBS="-lnccl"; AC_DEFINE([HAVE_NCCL], [1], [NCCL is available])
     scdino_nccl_summary="yes, version code $scdino_nccl_code"],
    [NCCL_CFLAGS=""; NCCL_LDFLAGS=""; NCCL_LIBS=""; scdino_nccl_summary="no"])
  AC_SUBST([NCCL_CFLAGS])
  AC_SUBST([NCCL_LDFLAGS])
  AC_SUBST([NCCL_LIBS])
  AM_CONDITIONAL([HAVE_NCCL], [test "x$have_nccl" = xyes])
])
