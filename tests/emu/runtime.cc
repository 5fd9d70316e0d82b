/* runtime.cc - the CUDA runtime calls of the backend, for the CPU emulator (tests/emu/).
 *
 * One emulated GPU shaped like an H100 (compute capability 9.0, 132 SMs, 227 KiB of opt-in shared
 * memory per block, 80 GiB).  Device memory is host memory from aligned_alloc, recorded so that
 * copies, frees and cudaPointerGetAttributes can check what they are given: a device-to-host copy
 * whose source is not device memory is an error here, as it would be a wrong result or a fault on
 * the GPU.
 *
 * Streams are queues (SCDINO_EMU_STREAMS=deferred, the default): a launch, an asynchronous copy or
 * memset, an event record or wait is queued on its stream and runs only when something needs it:
 * a synchronisation of its stream, an event or the device, a wait of another stream's work, a
 * library call on its stream (cuBLAS, cuDNN and NCCL force their stream, then run at once), a
 * query (one item per call, as a GPU makes progress while the host polls), cudaFree.  So work
 * runs as late as CUDA allows, and a program that reads a result without waiting for it, lets a
 * stream use what another has not finished, or rewrites a buffer an asynchronous copy still reads,
 * sees stale or new data here, as it could on a GPU.  The legacy stream (0) is a queue too; it
 * waits for, and is waited for by, streams created without cudaStreamNonBlocking, never by
 * non-blocking ones.  Copies from pageable host memory take the data at the call, copies to it run
 * at the call after their stream's earlier work, as CUDA's are.  SCDINO_EMU_STREAMS=sync runs
 * everything at once on the calling thread instead.  Event times are wall-clock times at which
 * the record runs. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/emu/emu_internal.h"

namespace {

/* The GPU's memory: 80 GiB, or SCDINO_EMU_MEM_MIB (a small GPU, on which a buffer sized for far
 * more rows than the work has fails as it would on a real one). */
size_t total_mem(void) {
  static size_t v;
  if (!v) {
    const char *e = getenv("SCDINO_EMU_MEM_MIB");
    v = e && atol(e) > 0 ? (size_t)atol(e) << 20 : (size_t)80 << 30;
  }
  return v;
}
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

/* A stream: its queue, items queued and run so far (an item's sequence number is its place). */
struct stream {
  std::deque<std::function<void()>> q;
  unsigned long long queued, ran;
  bool blocking; /* created without cudaStreamNonBlocking: ordered with the legacy stream */
  bool running;  /* an item of it is running (a wait on it from inside is a dependency cycle) */
};
std::vector<stream *> *streams; /* every stream ever created, the legacy one first */

/* A recorded event: complete once its stream has run item seq (the record). */
struct event {
  double t;
  stream *s;
  unsigned long long seq;
  int pending;    /* records queued and not yet run */
  bool destroyed; /* cudaEventDestroy came first: the last record frees it, as CUDA does */
};

bool deferred(void) {
  static int v = -1;
  if (v < 0) {
    const char *e = getenv("SCDINO_EMU_STREAMS");
    if (e && *e && strcmp(e, "sync") && strcmp(e, "deferred")) {
      fprintf(stderr, "cuda emulator: SCDINO_EMU_STREAMS=%s (sync or deferred)\n", e);
      exit(99);
    }
    v = !(e && !strcmp(e, "sync"));
  }
  return v;
}

stream *legacy(void) {
  if (!streams) streams = new std::vector<stream *>{new stream{{}, 0, 0, false, false}};
  return (*streams)[0];
}

stream *of(cudaStream_t s) {
  return s == 0 || s == cudaStreamLegacy || s == cudaStreamPerThread ? legacy() : (stream *)s;
}

void run_one(stream *st) {
  std::function<void()> f = std::move(st->q.front());
  st->q.pop_front();
  st->running = true;
  f();
  st->running = false;
  st->ran++;
}

/* Run st's items up to sequence number seq. */
void run_until(stream *st, unsigned long long seq) {
  if (st->ran >= seq) return;
  if (st->running) emu_die("a stream waits for work queued after the item it is running (a dependency cycle)");
  while (st->ran < seq) run_one(st);
}

void run_all(void) {
  legacy();
  for (bool any = true; any;) {
    any = false;
    for (stream *st : *streams)
      if (st->ran < st->queued) run_until(st, st->queued), any = true;
  }
}

void push(stream *st, std::function<void()> f) {
  st->q.push_back(std::move(f));
  st->queued++;
}

/* Queue f on s, after what the legacy stream's ordering asks for; run it at once in sync mode. */
void enqueue(cudaStream_t s, std::function<void()> f) {
  stream *st = of(s), *l = legacy();
  if (st == l) {
    for (stream *b : *streams)
      if (b->blocking && b->queued > b->ran) {
        const unsigned long long seq = b->queued;
        push(st, [b, seq] { run_until(b, seq); });
      }
  } else if (st->blocking && l->queued > l->ran) {
    const unsigned long long seq = l->queued;
    push(st, [l, seq] { run_until(l, seq); });
  }
  push(st, std::move(f));
  if (!deferred()) run_until(st, st->queued);
}

bool complete(const event *e) { return !e->s || e->s->ran >= e->seq; }

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

void run_all(void);

cudaError_t release(void *p, cudaMemoryType type, const char *fn) {
  if (!p) return cudaSuccess;
  init();
  run_all(); /* cudaFree and cudaFreeHost wait for the device */
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

void emu_enqueue(cudaStream_t s, std::function<void()> work) { enqueue(s, std::move(work)); }

void emu_stream_force(cudaStream_t s) {
  stream *st = of(s);
  run_until(st, st->queued);
}

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
  /* SCDINO_EMU_NAME: another name, for what reads the model from it (the benchmark's peaks) */
  const char *nm = getenv("SCDINO_EMU_NAME");
  snprintf(p->name, sizeof p->name, "%s", nm && *nm ? nm : "NVIDIA H100 (scdino CPU emulator)");
  /* Distinct per process, so that ranks of one emulated job have GPUs of their own; with
   * SCDINO_EMU_SAME_GPU=1 every process sees the same one (the tests of the shared-GPU checks). */
  const char *same = getenv("SCDINO_EMU_SAME_GPU");
  const pid_t pid = same && *same == '1' ? 0 : getpid();
  memcpy(p->uuid.bytes, "scdinoemu", 9);
  memcpy(p->uuid.bytes + 9, &pid, sizeof pid < 7 ? sizeof pid : 7);
  p->totalGlobalMem = total_mem();
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
  if (device_bytes + bytes > total_mem()) {
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
  *free_bytes = total_mem() - device_bytes;
  *total = total_mem();
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
  if (!rs) { /* pageable source: CUDA stages it before returning */
    std::shared_ptr<std::vector<char>> copy = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
    enqueue(s, [dst, copy] { memcpy(dst, copy->data(), copy->size()); });
  } else if (!rd) { /* pageable destination: the call returns when the copy is done */
    enqueue(s, [dst, src, n] { memmove(dst, src, n); });
    emu_stream_force(s);
  } else {
    enqueue(s, [dst, src, n] { memmove(dst, src, n); });
  }
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  waits[3]++;
  const cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, 0);
  if (e == cudaSuccess) emu_stream_force(0);
  return e;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
  if (!n) return cudaSuccess;
  const region *r = find(p, n, NULL);
  if (!r || r->type != cudaMemoryTypeDevice)
    return fail(cudaErrorInvalidValue, "cudaMemsetAsync(%p, %d, %zu): not device memory", p, v, n);
  enqueue(s, [p, v, n] { memset(p, v, n); });
  return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t n) { return cudaMemsetAsync(p, v, n, 0); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
  stream *st = new stream{{}, 0, 0, !(flags & cudaStreamNonBlocking), false};
  legacy();
  streams->push_back(st); /* kept: events recorded on it may outlive it */
  *s = (cudaStream_t)st;
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  emu_stream_force(s); /* its queued work still runs */
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  waits[0]++;
  emu_stream_force(s);
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
  stream *st = of(s);
  if (st->ran < st->queued && !st->running) run_one(st); /* the GPU gets on while the host polls */
  return st->ran < st->queued ? cudaErrorNotReady : cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
  (void)flags;
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: no event");
  const event *ev = (const event *)e;
  if (ev->s) { /* an event never recorded is complete */
    stream *src = ev->s;
    const unsigned long long seq = ev->seq;
    enqueue(s, [src, seq] { run_until(src, seq); });
  }
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
  waits[2]++;
  run_all();
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
  (void)flags;
  event *ev = new event{0.0, NULL, 0, 0, false};
  *e = (cudaEvent_t)ev;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  event *ev = (event *)e;
  if (!ev) return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: no event");
  if (ev->pending) /* CUDA returns at once and releases it when the device has completed it */
    ev->destroyed = true;
  else
    delete ev;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: no event");
  event *ev = (event *)e;
  stream *st = of(s);
  ev->pending++;
  enqueue(s, [ev] {
    ev->t = now();
    if (--ev->pending == 0 && ev->destroyed) delete ev;
  });
  ev->s = st;
  ev->seq = st->queued;
  /* in sync mode the record ran inside enqueue, before seq was set: it is complete all the same */
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventQuery: no event");
  event *ev = (event *)e;
  if (!complete(ev) && !ev->s->running) run_one(ev->s); /* progress while the host polls */
  return complete(ev) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  waits[1]++;
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: no event");
  event *ev = (event *)e;
  if (ev->s) run_until(ev->s, ev->seq);
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  if (!a || !b) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: no event");
  /* as CUDA: both must have been recorded and have completed */
  if (!((event *)a)->s || !((event *)b)->s)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was never recorded");
  if (!complete((event *)a) || !complete((event *)b)) return cudaErrorNotReady;
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
