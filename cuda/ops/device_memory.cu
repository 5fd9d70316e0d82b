/* device_memory.cu - the CUDA backend's device memory: allocations counted in the in-use and peak
 * figures (out of memory ends the job with the sizes involved), and the scratch slots. */
#include "build_config.h"

#include <unordered_map>

#include "cuda/backend_cuda.h"
#include "cuda/ops/cuda_internal.h"

/* ---- memory accounting ------------------------------------------------------------------------ */

static std::unordered_map<void *, size_t> *live; /* device allocations and their sizes */
static size_t bytes_in_use, bytes_peak;

void *cu_dev_alloc(size_t bytes, const char *what) {
  void *p = NULL;
  if (bytes == 0) bytes = 256;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    scd_fatal(SCD_EXIT_FAILURE,
              "GPU %d out of memory: %s of %.1f MiB failed (%s); the backend holds %.1f MiB, the "
              "device has %.1f of %.1f MiB free; lower the calculation's batch (training.batch_size_per_rank, "
              "features.batch_size, linear.batch_size) or knn.block_rows",
              cu.device, what, bytes / 1048576.0, cudaGetErrorString(e), bytes_in_use / 1048576.0,
              fr / 1048576.0, tot / 1048576.0);
  }
  if (!live) live = new std::unordered_map<void *, size_t>();
  (*live)[p] = bytes;
  bytes_in_use += bytes;
  if (bytes_in_use > bytes_peak) bytes_peak = bytes_in_use;
  return p;
}

void cu_dev_free(void *p) {
  if (!p) return;
  if (live) {
    auto it = live->find(p);
    if (it != live->end()) {
      bytes_in_use -= it->second;
      live->erase(it);
    }
  }
  CHECK_CUDA(cudaFree(p)); /* waits for the device: no queued kernel can still use p */
}

/* ---- scratch ------------------------------------------------------------------------------------ */

static void *scratch_ptr[SLOT_COUNT];
static size_t scratch_size[SLOT_COUNT];

void *cu_scratch(int slot, size_t bytes) {
  SCD_ASSERT(slot >= 0 && slot < SLOT_COUNT);
  if (bytes > scratch_size[slot]) {
    size_t want = bytes + bytes / 4; /* some headroom: sizes vary between passes */
    want = (want + 255) / 256 * 256;
    if (scratch_ptr[slot]) {
      CHECK_CUDA(cudaStreamSynchronize(cu.stream));
      cu_dev_free(scratch_ptr[slot]);
    }
    scratch_ptr[slot] = cu_dev_alloc(want, "scratch");
    scratch_size[slot] = want;
  }
  return scratch_ptr[slot];
}

void *cu_upload_table(int slot, const void *host, size_t bytes) {
  void *d = cu_scratch(slot, bytes);
  /* From pageable memory the copy is staged before the call returns, so the host table may be
   * reused at once; it still runs in stream order after the ops before it. */
  if (bytes) CHECK_CUDA(cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, cu.stream));
  return d;
}

size_t cu_dev_size(const void *p) {
  if (!live) return 0;
  auto it = live->find((void *)p);
  return it != live->end() ? it->second : 0;
}

extern "C" void backend_cuda_memory(size_t *in_use, size_t *peak, size_t *dev_free,
                                    size_t *dev_total) {
  if (in_use) *in_use = bytes_in_use;
  if (peak) *peak = bytes_peak;
  size_t fr = 0, tot = 0;
  if (cu.ready) CHECK_CUDA(cudaMemGetInfo(&fr, &tot));
  if (dev_free) *dev_free = fr;
  if (dev_total) *dev_total = tot;
}

extern "C" void backend_cuda_reset_peak(void) { bytes_peak = bytes_in_use; }
