# SCDINO_CHECK_LIBFABRIC: optional; when found, scdino reports the libfabric version and the
# providers it sees (efa, tcp, shm, ...) in its start-up log, so EFA problems are visible.
AC_DEFUN([SCDINO_CHECK_LIBFABRIC], [
  AC_ARG_WITH([libfabric],
    [AS_HELP_STRING([--with-libfabric@<:@=DIR@:>@], [report libfabric providers in the log (default: if found)])],
    [], [with_libfabric=guess])
  have_libfabric=no
  AS_IF([test "x$with_libfabric" != xno], [
    AS_IF([test "x$with_libfabric" != xguess && test "x$with_libfabric" != xyes],
      [LIBFABRIC_CFLAGS="-I$with_libfabric/include"; LIBFABRIC_LIBS="-L$with_libfabric/lib -lfabric"; have_libfabric=yes],
      [PKG_CHECK_MODULES([LIBFABRIC], [libfabric], [have_libfabric=yes], [have_libfabric=no])])
    AS_IF([test "x$have_libfabric" = xyes], [
      save_CPPFLAGS="$CPPFLAGS"; save_LIBS="$LIBS"
      CPPFLAGS="$CPPFLAGS $LIBFABRIC_CFLAGS"; LIBS="$LIBFABRIC_LIBS $LIBS"
      AC_MSG_CHECKING([for fi_getinfo])
      AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <rdma/fabric.h>]], [[fi_getinfo(FI_VERSION(1,5), 0, 0, 0, 0, 0);]])],
        [AC_MSG_RESULT([yes])], [AC_MSG_RESULT([no]); have_libfabric=no])
      CPPFLAGS="$save_CPPFLAGS"; LIBS="$save_LIBS"])
    AS_IF([test "x$have_libfabric" = xno && test "x$with_libfabric" != xguess],
      [AC_MSG_ERROR([libfabric requested but not usable (Debian: apt-get install libfabric-dev)])])])
  AS_IF([test "x$have_libfabric" = xyes],
    [AC_DEFINE([HAVE_LIBFABRIC], [1], [libfabric is available])
     scdino_libfabric_summary="yes, `$PKG_CONFIG --modversion libfabric 2>/dev/null`"],
    [LIBFABRIC_CFLAGS=""; LIBFABRIC_LIBS=""; scdino_libfabric_summary="no"])
  AC_SUBST([LIBFABRIC_CFLAGS])
  AC_SUBST([LIBFABRIC_LIBS])
  AM_CONDITIONAL([HAVE_LIBFABRIC], [test "x$have_libfabric" = xyes])
])
