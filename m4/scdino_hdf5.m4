# SCDINO_CHECK_HDF5: parallel HDF5 is required.  Flags come from HDF5_CFLAGS/HDF5_LIBS,
# else --with-hdf5=DIR, else pkg-config (hdf5-openmpi, hdf5-mpi, hdf5).  Parallel support is
# verified by linking a program that calls H5Pset_fapl_mpio, not by the wrapper's name.
AC_DEFUN([SCDINO_CHECK_HDF5], [
  AC_ARG_VAR([HDF5_CFLAGS], [C preprocessor flags for parallel HDF5])
  AC_ARG_VAR([HDF5_LIBS], [linker flags for parallel HDF5])
  AC_ARG_WITH([hdf5],
    [AS_HELP_STRING([--with-hdf5=DIR], [parallel HDF5 installation prefix])], [], [with_hdf5=yes])
  AS_IF([test "x$with_hdf5" = xno], [AC_MSG_ERROR([scdino needs parallel HDF5; --without-hdf5 is not supported])])
  scdino_hdf5_how=""
  AS_IF([test -n "$HDF5_LIBS"], [scdino_hdf5_how="environment"],
        [test "x$with_hdf5" != xyes], [
          HDF5_CFLAGS="-I$with_hdf5/include"; HDF5_LIBS="-L$with_hdf5/lib -lhdf5"
          scdino_hdf5_how="$with_hdf5"],
        [for m in hdf5-openmpi hdf5-mpi hdf5; do
           AS_IF([test -n "$PKG_CONFIG" && $PKG_CONFIG --exists $m], [
             HDF5_CFLAGS=`$PKG_CONFIG --cflags $m`; HDF5_LIBS=`$PKG_CONFIG --libs $m`
             scdino_hdf5_how="pkg-config $m"; break])
         done])
  AS_IF([test -z "$scdino_hdf5_how"], [HDF5_LIBS="-lhdf5"; scdino_hdf5_how="default paths"])
  save_CPPFLAGS="$CPPFLAGS"; save_LIBS="$LIBS"
  CPPFLAGS="$CPPFLAGS $HDF5_CFLAGS"; LIBS="$HDF5_LIBS $LIBS"
  AC_MSG_CHECKING([whether HDF5 has the parallel (MPI-IO) API])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>
#include <hdf5.h>]],
      [[hid_t p = H5Pcreate(H5P_FILE_ACCESS); H5Pset_fapl_mpio(p, MPI_COMM_WORLD, MPI_INFO_NULL); H5Pclose(p);]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([parallel HDF5 not found ($scdino_hdf5_how). Install it (Debian: apt-get install libhdf5-openmpi-dev) or set HDF5_CFLAGS/HDF5_LIBS; see config.log])])
  AC_COMPUTE_INT([scdino_h5_maj], [H5_VERS_MAJOR], [[#include <hdf5.h>]])
  AC_COMPUTE_INT([scdino_h5_min], [H5_VERS_MINOR], [[#include <hdf5.h>]])
  AC_COMPUTE_INT([scdino_h5_rel], [H5_VERS_RELEASE], [[#include <hdf5.h>]])
  CPPFLAGS="$save_CPPFLAGS"; LIBS="$save_LIBS"
  scdino_hdf5_summary="yes, $scdino_h5_maj.$scdino_h5_min.$scdino_h5_rel ($scdino_hdf5_how)"
  AC_SUBST([HDF5_CFLAGS])
  AC_SUBST([HDF5_LIBS])
])
