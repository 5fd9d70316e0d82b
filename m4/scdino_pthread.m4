# AX_PTHREAD_SIMPLE: POSIX threads via -pthread (gcc and clang accept it).
AC_DEFUN([AX_PTHREAD_SIMPLE], [
  AC_MSG_CHECKING([whether $CC accepts -pthread])
  save_CFLAGS="$CFLAGS"; CFLAGS="$CFLAGS -pthread"
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <pthread.h>]],
      [[pthread_t t; pthread_create(&t, 0, 0, 0); pthread_join(t, 0);]])],
    [AC_MSG_RESULT([yes]); PTHREAD_CFLAGS="-pthread"],
    [AC_MSG_RESULT([no]); AC_MSG_ERROR([POSIX threads are required])])
  CFLAGS="$save_CFLAGS"
  AC_SUBST([PTHREAD_CFLAGS])
])
