# SCDINO_PROG_MPICC: pick the MPI C wrapper (mpicc) as CC, before AC_PROG_CC runs.
# Order of precedence: MPICC from the environment, --with-mpi=DIR/bin, then PATH.
AC_DEFUN([SCDINO_PROG_MPICC], [
  AC_ARG_VAR([MPICC], [MPI C compiler wrapper (default: mpicc)])
  AC_ARG_WITH([mpi],
    [AS_HELP_STRING([--with-mpi=DIR], [MPI installation prefix (mpicc is looked for in DIR/bin)])],
    [], [with_mpi=yes])
  AS_IF([test "x$with_mpi" = xno], [AC_MSG_ERROR([scdino needs MPI; --without-mpi is not supported])])
  AS_IF([test -z "$MPICC"], [
    AS_IF([test "x$with_mpi" != xyes],
      [AC_PATH_PROGS([MPICC], [mpicc], [], [$with_mpi/bin])],
      [AC_PATH_PROGS([MPICC], [mpicc mpicc.openmpi])])])
  AS_IF([test -z "$MPICC"],
    [AC_MSG_ERROR([no MPI C compiler wrapper found. Install Open MPI (Debian: apt-get install libopenmpi-dev openmpi-bin) or set MPICC=/path/to/mpicc])])
  CC="$MPICC"
])

# SCDINO_CHECK_MPI: after AC_PROG_CC, verify that the wrapper links an MPI program.
AC_DEFUN([SCDINO_CHECK_MPI], [
  AC_LANG_PUSH([C])
  AC_MSG_CHECKING([whether $MPICC links an MPI program])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]],
      [[int argc = 0; char **argv = 0; MPI_Init(&argc, &argv); MPI_Finalize();]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([$MPICC cannot link an MPI program; see config.log])])
  AC_LANG_POP([C])
  scdino_mpi_summary="yes ($MPICC)"
])
