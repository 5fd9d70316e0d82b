# SCDINO_CHECK_CUDA: optional CUDA backend.  --with-cuda[=DIR] (default: use it if found in
# /usr/local/cuda or via nvcc on PATH).  Links against lib64/stubs as well, so the build works on
# hosts without a GPU driver.  --with-cuda-arch=LIST picks the SM architectures (default 70,75,80,90:
# V100, T4, A100, H100/H200, with PTX of the highest one so newer GPUs JIT it; a list without 70 or
# 75 leaves those GPUs only the PTX of a newer one, which they cannot run).
AC_DEFUN([SCDINO_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@], [build the CUDA backend (default: if found)])],
    [], [with_cuda=guess])
  AC_ARG_WITH([cuda-arch],
    [AS_HELP_STRING([--with-cuda-arch=LIST], [comma-separated SM versions, e.g. 80,90 (default: 70,75,80,90, plus PTX of the last)])],
    [], [with_cuda_arch=70,75,80,90])
  AC_ARG_VAR([NVCC], [CUDA compiler])
  AC_ARG_VAR([NVCCFLAGS], [extra flags for nvcc])
  have_cuda=no
  AS_IF([test "x$with_cuda" != xno], [
    AS_CASE([$with_cuda],
      [guess|yes], [AS_IF([test -n "$NVCC"], [cuda_dir=`dirname \`dirname $NVCC\``],
                          [test -x /usr/local/cuda/bin/nvcc], [cuda_dir=/usr/local/cuda],
                          [cuda_nvcc=`command -v nvcc 2>/dev/null`
                           AS_IF([test -n "$cuda_nvcc"], [cuda_dir=`dirname \`dirname $cuda_nvcc\``], [cuda_dir=""])])],
      [cuda_dir=$with_cuda])
    AS_IF([test -n "$cuda_dir" && test -x "$cuda_dir/bin/nvcc"], [
      AS_IF([test -z "$NVCC"], [NVCC="$cuda_dir/bin/nvcc"])
      cuda_libdir="$cuda_dir/lib64"
      AS_IF([test -d "$cuda_libdir"], [], [cuda_libdir="$cuda_dir/lib"])
      CUDA_CFLAGS="-isystem $cuda_dir/include"
      CUDA_LDFLAGS="-L$cuda_libdir -Wl,-rpath,$cuda_libdir"
      AS_IF([test -d "$cuda_libdir/stubs"], [CUDA_LDFLAGS="$CUDA_LDFLAGS -L$cuda_libdir/stubs"])
      save_CPPFLAGS="$CPPFLAGS"; save_LIBS="$LIBS"; save_LDFLAGS="$LDFLAGS"
      CPPFLAGS="$CPPFLAGS $CUDA_CFLAGS"; LDFLAGS="$LDFLAGS $CUDA_LDFLAGS"
      have_cuda=yes
      AC_CHECK_HEADERS([cuda_runtime.h cublasLt.h], [], [have_cuda=no])
      AS_IF([test "x$have_cuda" = xyes], [AC_CHECK_LIB([cudart], [cudaGetDeviceCount], [], [have_cuda=no])])
      AS_IF([test "x$have_cuda" = xyes], [AC_CHECK_LIB([cublasLt], [cublasLtCreate], [], [have_cuda=no])])
      AS_IF([test "x$have_cuda" = xyes], [AC_CHECK_LIB([cublas], [cublasCreate_v2], [], [have_cuda=no])])
      AS_IF([test "x$have_cuda" = xyes], [
        AC_COMPUTE_INT([scdino_cudart_version], [CUDART_VERSION], [[#include <cuda_runtime_api.h>]])])
      CPPFLAGS="$save_CPPFLAGS"; LIBS="$save_LIBS"; LDFLAGS="$save_LDFLAGS"
      AS_IF([test "x$have_cuda" = xyes], [
        AC_MSG_CHECKING([whether $NVCC compiles a kernel])
        cat > conftest.cu <<_SCDEOF
__global__ void k(float *x) { x[[threadIdx.x]] += 1.0f; }
int main(void) { k<<<1, 1>>>(0); return 0; }
_SCDEOF
        AS_IF([$NVCC -c conftest.cu -o conftest.o >&AS_MESSAGE_LOG_FD 2>&1],
          [AC_MSG_RESULT([yes])], [AC_MSG_RESULT([no]); have_cuda=no])
        rm -f conftest.cu conftest.o])])
    AS_IF([test "x$have_cuda" = xno && test "x$with_cuda" != xguess],
      [AC_MSG_ERROR([CUDA was requested but is not usable (looked in '$cuda_dir'); see config.log])])])
  NVCC_ARCH=""
  NVCC_ARCH_SUMMARY="-"
  AS_IF([test "x$have_cuda" = xyes], [
    # The architectures this nvcc can compile for (CUDA 13 has no sm_70: a V100 needs CUDA 12).
    # Of the default list, those it lacks are left out and said; one asked for by name stops here.
    cuda_known=`$NVCC --list-gpu-arch 2>/dev/null | $SED -n 's/^compute_//p' | tr '\n' ' '`
    last=""; kept=""; dropped=""
    for a in `echo "$with_cuda_arch" | tr ',' ' '`; do
      a=`echo $a | $SED -e 's/^sm_//' -e 's/^compute_//'`
      AS_IF([test -n "$cuda_known" && ! echo " $cuda_known " | grep -q " $a "], [
        AS_IF([test "x$with_cuda_arch" = x70,75,80,90], [dropped="$dropped sm_$a"; continue],
          [AC_MSG_ERROR([--with-cuda-arch: $NVCC cannot compile for sm_$a (it knows: $cuda_known)])])])
      NVCC_ARCH="$NVCC_ARCH -gencode arch=compute_$a,code=sm_$a"; last=$a; kept="$kept sm_$a"
    done
    AS_IF([test -z "$last"], [AC_MSG_ERROR([--with-cuda-arch: no architecture left to compile for])])
    NVCC_ARCH="$NVCC_ARCH -gencode arch=compute_$last,code=compute_$last"
    NVCC_ARCH_SUMMARY="`echo $kept` + PTX compute_$last"
    AS_IF([test -n "$dropped"], [
      NVCC_ARCH_SUMMARY="$NVCC_ARCH_SUMMARY (left out:$dropped, which this nvcc cannot compile for)"
      AC_MSG_WARN([CUDA: no device code for$dropped: $NVCC cannot compile for it (sm_70, a V100, needs CUDA 12.x)])])
    CUDA_LIBS="-lcublasLt -lcublas -lcudart -lstdc++"
    AC_DEFINE([HAVE_CUDA], [1], [the CUDA backend is built])
    scdino_cuda_summary="yes, runtime $scdino_cudart_version ($cuda_dir)"],
    [CUDA_CFLAGS=""; CUDA_LDFLAGS=""; CUDA_LIBS=""; NVCC=""; scdino_cuda_summary="no"])
  AC_SUBST([CUDA_CFLAGS])
  AC_SUBST([CUDA_LDFLAGS])
  AC_SUBST([CUDA_LIBS])
  AC_SUBST([NVCC_ARCH])
  AM_CONDITIONAL([HAVE_CUDA], [test "x$have_cuda" = xyes])
])
