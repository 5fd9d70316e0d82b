# SCDINO_CHECK_MPIEXEC: the launcher "make check" uses for multi-rank tests.  Tests call
# "$MPIEXEC -n N prog"; Open MPI needs --oversubscribe on small machines and refuses to run
# as root unless told.
AC_DEFUN([SCDINO_CHECK_MPIEXEC], [
  AC_ARG_VAR([MPIEXEC], [MPI launcher used by make check, without -n (default: mpiexec --oversubscribe)])
  AS_IF([test -z "$MPIEXEC"], [
    AC_PATH_PROGS([scdino_mpiexec], [mpiexec mpirun mpiexec.openmpi], [])
    AS_IF([test -n "$scdino_mpiexec"], [
      MPIEXEC="$scdino_mpiexec"
      AS_IF([$scdino_mpiexec --version 2>&1 | grep -q "Open MPI\|OpenRTE"],
        [MPIEXEC="$MPIEXEC --oversubscribe"
         AS_IF([test "`id -u`" = 0], [MPIEXEC="$MPIEXEC --allow-run-as-root"])])],
      [MPIEXEC=none])])
  AC_SUBST([MPIEXEC])
])
