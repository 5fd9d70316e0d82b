/* runtime.cc - the CUDA runtime calls of the backend, for the CPU emulator (tests/emu/).
 *
 * One emulated GPU shaped like an H100 (compute capability 9.0, 132 SMs, 227 KiB of opt-in shared
 * memory per block, 80 GiB).  Device memory is host memory from aligned_alloc, recorded so that
 * copies, frees and cudaPointerGetAttributes can check what they are given: a device-to-host copy
 * whose source is not device memory is an error here, as it would be a wrong result or a fault on
 * the GPU.  Everything runs at once on the calling thread: streams and events only keep order
 * trivially, and event times are wall-clock times. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <map>
#include <string>

#include "emu_internal.h"

namespace {

const size_t TOTAL_MEM = (size_t)80 << 30;
/* Bytes of shared memory per block a kernel may ask for: an H100's 227 KiB, or
 * SCDINO_EMU_SMEM_OPTIN (e.g. 101376, the 99 KiB of compute capability 8.6 and 8.9). */
int smem_optin(void) {
  static int v;
  if (!v) {
    const char *e = getenv("SCDINO_EMU_SMEM_OPTIN");
    v = e && atoi(e) >= 48 * 1024 ? atoi(e) : 232448;
  }
  return v;
}

struct region {
  size_t bytes;
  cudaMemoryType type;
};
std::map<uintptr_t, region> *regions; /* by start address */
size_t device_bytes;
cudaError_t last_error = cudaSuccess;
std::map<const void *, size_t> *smem_limits;
std::map<std::string, unsigned long long> *launch_counts;

struct event {
  double t;
};

double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

void init(void) {
  if (!regions) regions = new std::map<uintptr_t, region>();
  if (!smem_limits) smem_limits = new std::map<const void *, size_t>();
}

/* The region holding [p, p + n), or NULL. */
const region *find(const void *p, size_t n, uintptr_t *start) {
  init();
  const uintptr_t a = (uintptr_t)p;
  auto it = regions->upper_bound(a);
  if (it == regions->begin()) return NULL;
  --it;
  if (a + n > it->first + it->second.bytes) return NULL;
  if (start) *start = it->first;
  return &it->second;
}

/* One line on stderr: "cuda emulator: [what]message". */
void report(const char *what, const char *fmt, va_list ap) {
  fprintf(stderr, "cuda emulator: %s", what);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
}

cudaError_t fail(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cudaError_t fail(cudaError_t e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  report("", fmt, ap);
  va_end(ap);
  last_error = e;
  return e;
}

/* Exactly the bytes asked for (aligned as cudaMalloc's), so that an access past the end is outside
 * the region for the copy checks, and outside the heap block for AddressSanitizer. */
void *alloc(size_t bytes, cudaMemoryType type) {
  init();
  const size_t n = bytes ? bytes : 1;
  void *p = NULL;
  if (posix_memalign(&p, 256, n) != 0) return NULL;
  /* Not zeros (fresh GPU memory is not zeroed either): NaN in fp32 and bf16, so that a read of
   * memory never written shows in the results. */
  memset(p, 0xff, n);
  (*regions)[(uintptr_t)p] = region{n, type};
  if (type == cudaMemoryTypeDevice) device_bytes += n;
  return p;
}

cudaError_t release(void *p, cudaMemoryType type, const char *fn) {
  if (!p) return cudaSuccess;
  init();
  auto it = regions->find((uintptr_t)p);
  if (it == regions->end() || it->second.type != type)
    return fail(cudaErrorInvalidValue, "%s(%p): not the start of a %s allocation", fn, p,
                type == cudaMemoryTypeDevice ? "device" : "pinned host");
  if (type == cudaMemoryTypeDevice) device_bytes -= it->second.bytes;
  regions->erase(it);
  free(p);
  return cudaSuccess;
}

/* Host waits for the device, by call (a GPU drains its queue at each: launch latency shows). */
unsigned long long waits[4];
const char *const wait_names[4] = {"cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize",
                                   "cudaMemcpy"};

void print_stats(void) {
  if (!launch_counts) return;
  unsigned long long n = 0;
  for (auto &kv : *launch_counts) n += kv.second;
  fprintf(stderr, "cuda emulator: %llu launches of %zu kernels; host waits:", n, launch_counts->size());
  for (int i = 0; i < 4; i++) fprintf(stderr, " %s %llu", wait_names[i], waits[i]);
  fprintf(stderr, "\n");
  const char *s = getenv("SCDINO_EMU_STATS");
  if (s && !strcmp(s, "2")) /* and per kernel */
    for (auto &kv : *launch_counts) fprintf(stderr, "cuda emulator: %10llu %s\n", kv.second, kv.first.c_str());
}

} // namespace

void emu_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  report("", fmt, ap);
  va_end(ap);
  exit(99);
}

void emu_launch_error(cudaError_t e, const char *kernel, const char *fmt, ...) {
  char what[256];
  snprintf(what, sizeof what, "launch of %s: ", kernel);
  va_list ap;
  va_start(ap, fmt);
  report(what, fmt, ap);
  va_end(ap);
  last_error = e;
}

int emu_in_device_memory(const void *p, size_t n) {
  const region *r = find(p, n, NULL);
  return r && r->type == cudaMemoryTypeDevice;
}

size_t emu_smem_limit(const void *kernel) {
  init();
  auto it = smem_limits->find(kernel);
  return it == smem_limits->end() ? 48 * 1024 : it->second;
}

void emu_count_launch(const char *kernel, unsigned long long blocks, unsigned long long threads) {
  (void)blocks;
  (void)threads;
  if (!launch_counts) {
    launch_counts = new std::map<std::string, unsigned long long>();
    const char *s = getenv("SCDINO_EMU_STATS");
    if (s && (*s == '1' || *s == '2')) atexit(print_stats);
  }
  (*launch_counts)[kernel]++;
}

extern "C" {

cudaError_t cudaGetDeviceCount(int *n) {
  *n = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int dev) {
  return dev == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice, "cudaSetDevice(%d): one emulated GPU", dev);
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev) {
  if (dev != 0) return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties(%d): one emulated GPU", dev);
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "NVIDIA H100 (scdino CPU emulator)");
  /* Distinct per process, so that ranks of one emulated job have GPUs of their own; with
   * SCDINO_EMU_SAME_GPU=1 every process sees the same one (the tests of the shared-GPU checks). */
  const char *same = getenv("SCDINO_EMU_SAME_GPU");
  const pid_t pid = same && *same == '1' ? 0 : getpid();
  memcpy(p->uuid.bytes, "scdinoemu", 9);
  memcpy(p->uuid.bytes + 9, &pid, sizeof pid < 7 ? sizeof pid : 7);
  p->totalGlobalMem = TOTAL_MEM;
  p->sharedMemPerBlock = 48 * 1024;
  p->sharedMemPerBlockOptin = smem_optin();
  p->sharedMemPerMultiprocessor = 233472;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  p->maxThreadsPerMultiProcessor = 2048;
  p->l2CacheSize = 50 << 20;
  p->memoryBusWidth = 5120;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "cudaSuccess";
  case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
  case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
  case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
  case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
  case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
  default: return "cudaError (emulated)";
  }
}
const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "no error";
  case cudaErrorInvalidValue: return "invalid argument";
  case cudaErrorMemoryAllocation: return "out of memory";
  case cudaErrorInvalidConfiguration: return "invalid configuration argument";
  case cudaErrorInvalidDevice: return "invalid device ordinal";
  case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
  default: return "emulated CUDA error";
  }
}

cudaError_t cudaMalloc(void **p, size_t bytes) {
  init();
  if (device_bytes + bytes > TOTAL_MEM) {
    *p = NULL;
    last_error = cudaErrorMemoryAllocation;
    return cudaErrorMemoryAllocation;
  }
  *p = alloc(bytes, cudaMemoryTypeDevice);
  if (!*p) return fail(cudaErrorMemoryAllocation, "cudaMalloc(%zu): the host has no memory left", bytes);
  return cudaSuccess;
}
cudaError_t cudaFree(void *p) { return release(p, cudaMemoryTypeDevice, "cudaFree"); }
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags) {
  (void)flags;
  *p = alloc(bytes, cudaMemoryTypeHost);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation, "cudaHostAlloc(%zu) failed", bytes);
}
cudaError_t cudaMallocHost(void **p, size_t bytes) { return cudaHostAlloc(p, bytes, 0); }
cudaError_t cudaFreeHost(void *p) { return release(p, cudaMemoryTypeHost, "cudaFreeHost"); }

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
  *free_bytes = TOTAL_MEM - device_bytes;
  *total = TOTAL_MEM;
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
  memset(a, 0, sizeof *a);
  uintptr_t start = 0;
  const region *r = find(p, 1, &start);
  a->type = r ? r->type : cudaMemoryTypeUnregistered;
  a->device = 0;
  a->devicePointer = r && r->type == cudaMemoryTypeDevice ? (void *)p : NULL;
  a->hostPointer = !r || r->type == cudaMemoryTypeHost ? (void *)p : NULL;
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
  (void)s;
  if (!n) return cudaSuccess;
  const region *rd = find(dst, n, NULL), *rs = find(src, n, NULL);
  const bool dd = rd && rd->type == cudaMemoryTypeDevice, sd = rs && rs->type == cudaMemoryTypeDevice;
  const bool ok = kind == cudaMemcpyDefault || (kind == cudaMemcpyHostToDevice && dd && !sd) ||
                  (kind == cudaMemcpyDeviceToHost && !dd && sd) || (kind == cudaMemcpyDeviceToDevice && dd && sd) ||
                  (kind == cudaMemcpyHostToHost && !dd && !sd);
  if (!ok)
    return fail(cudaErrorInvalidValue, "cudaMemcpyAsync(%p, %p, %zu, kind %d): destination %s, source %s", dst, src,
                n, (int)kind, dd ? "in device memory" : "not (wholly) in device memory",
                sd ? "in device memory" : "not (wholly) in device memory");
  memmove(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  waits[3]++;
  return cudaMemcpyAsync(dst, src, n, kind, 0);
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
  (void)s;
  if (!n) return cudaSuccess;
  const region *r = find(p, n, NULL);
  if (!r || r->type != cudaMemoryTypeDevice)
    return fail(cudaErrorInvalidValue, "cudaMemsetAsync(%p, %d, %zu): not device memory", p, v, n);
  memset(p, v, n);
  return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t n) { return cudaMemsetAsync(p, v, n, 0); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
  (void)flags;
  *s = (cudaStream_t)malloc(64);
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  free((void *)s);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  (void)s;
  waits[0]++;
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
  (void)s;
  return cudaSuccess; /* everything queued has run */
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
  (void)s;
  (void)flags;
  return e ? cudaSuccess : fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: no event");
}
cudaError_t cudaDeviceSynchronize(void) {
  waits[2]++;
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
  (void)flags;
  event *ev = new event{0.0};
  *e = (cudaEvent_t)ev;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete (event *)e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  (void)s;
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: no event");
  ((event *)e)->t = now();
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  return e ? cudaSuccess : fail(cudaErrorInvalidResourceHandle, "cudaEventQuery: no event");
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  waits[1]++;
  return cudaEventQuery(e);
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  if (!a || !b) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: no event");
  *ms = (float)(1e3 * (((event *)b)->t - ((event *)a)->t));
  return cudaSuccess;
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, const void *func) {
  memset(a, 0, sizeof *a);
  a->maxThreadsPerBlock = 1024;
  a->maxDynamicSharedSizeBytes = (int)emu_smem_limit(func);
  a->ptxVersion = 90;
  a->binaryVersion = 90;
  return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
  init();
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || value > smem_optin())
      return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: %d bytes of dynamic shared memory (at most %d)",
                  value, smem_optin());
    (*smem_limits)[func] = (size_t)value;
  }
  return cudaSuccess;
}

} // extern "C"
