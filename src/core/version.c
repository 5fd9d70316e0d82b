/* version.c - versions of scdino and of every library it was built against. */
#include "build_config.h"

#include <hdf5.h>
#include <mpi.h>
#include <png.h>
#include <stdio.h>
#include <string.h>
#include <tiffio.h>
#ifdef HAVE_OPENBLAS_GET_CONFIG
#include <cblas.h>
#endif
#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef HAVE_CUDNN
#include <cudnn.h>
#endif
#ifdef HAVE_NCCL
#include <nccl.h>
#endif
#ifdef HAVE_LIBFABRIC
#include <rdma/fabric.h>
#endif

#include "core/comm.h"
#include "core/version.h"

static void first_line(const char *s, char *out, size_t n) {
  snprintf(out, n, "%s", s);
  char *nl = strchr(out, '\n');
  if (nl) *nl = '\0';
}

void version_print(FILE *f) {
  char buf[512];
  fprintf(f, "scdino %s\n", PACKAGE_VERSION);
  fprintf(f, "  configured with: %s\n", SCDINO_CONFIGURE_FLAGS[0] ? SCDINO_CONFIGURE_FLAGS : "(defaults)");
  fprintf(f, "  MPI      : %s (MPI standard %d.%d)\n", comm_library_version(), MPI_VERSION, MPI_SUBVERSION);
  unsigned maj, min, rel;
  H5get_libversion(&maj, &min, &rel);
  fprintf(f, "  HDF5     : %u.%u.%u (headers %d.%d.%d, parallel)\n", maj, min, rel, H5_VERS_MAJOR,
          H5_VERS_MINOR, H5_VERS_RELEASE);
  first_line(TIFFGetVersion(), buf, sizeof buf);
  fprintf(f, "  libtiff  : %s\n", buf);
  fprintf(f, "  libpng   : %s\n", png_get_libpng_ver(NULL));
#ifdef HAVE_OPENBLAS_GET_CONFIG
  fprintf(f, "  BLAS     : %s\n", openblas_get_config());
#else
  fprintf(f, "  BLAS     : CBLAS (vendor unknown)\n");
#endif
#ifdef HAVE_CUDA
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
  fprintf(f, "  CUDA     : runtime %d.%d (built against %d.%d); driver %s", rt / 1000, (rt % 1000) / 10,
          CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10, drv ? "" : "none found\n");
  if (drv) fprintf(f, "%d.%d\n", drv / 1000, (drv % 1000) / 10);
#else
  fprintf(f, "  CUDA     : not built (configure --with-cuda)\n");
#endif
#ifdef HAVE_CUDNN
  size_t cv = cudnnGetVersion();
  fprintf(f, "  cuDNN    : %zu.%zu.%zu (built against %d.%d.%d)\n", cv / 10000, (cv % 10000) / 100, cv % 100,
          CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
#else
  fprintf(f, "  cuDNN    : not built\n");
#endif
#ifdef HAVE_NCCL
  int nv = 0;
  ncclGetVersion(&nv);
  fprintf(f, "  NCCL     : %d.%d.%d (built against %d.%d.%d)\n", nv / 10000, (nv % 10000) / 100, nv % 100,
          NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
#else
  fprintf(f, "  NCCL     : not built\n");
#endif
#ifdef HAVE_LIBFABRIC
  uint32_t fv = fi_version();
  fprintf(f, "  libfabric: %u.%u\n", FI_MAJOR(fv), FI_MINOR(fv));
#else
  fprintf(f, "  libfabric: not built\n");
#endif
}

void version_summary(char *buf, size_t n) {
  unsigned maj, min, rel;
  H5get_libversion(&maj, &min, &rel);
  snprintf(buf, n, "scdino %s (%s; HDF5 %u.%u.%u%s%s)", PACKAGE_VERSION, comm_library_version(), maj, min,
           rel,
#ifdef HAVE_CUDA
           "; CUDA backend built",
#else
           "; CPU only",
#endif
#ifdef HAVE_NCCL
           ", NCCL"
#else
           ""
#endif
  );
}
