/* fiber.cc - the CPU emulator's kernel launch: each CUDA thread of a block is a fiber,
 * blocks run one after another, and the fibers switch only at __syncthreads and warp barriers.
 *
 * The scheduler runs every runnable fiber in thread order until it finishes or waits at a barrier;
 * a block barrier opens when every thread of the block waits at one, a warp barrier when every
 * thread of that warp does.  A barrier that some threads cannot reach is reported with the kernel,
 * block and threads, and ends the program (status 99): threads that returned while others wait at
 * __syncthreads or a full-warp shuffle (undefined in CUDA's rules, however it happens to behave on
 * a given GPU), or threads waiting at different barriers with nothing left to run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <map>
#include <vector>

#include "tests/emu/cuda_emu.h"
#include "tests/emu/emu_internal.h"

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace {

void fiber_main(void);

/* ---- context switches: six callee-saved registers and the stack pointer on x86-64 (ucontext's
 * switches make a system call each, which dominated the emulator's time); ucontext elsewhere. */
#if defined(__x86_64__)
struct ctx_t {
  void *sp;
};
extern "C" void emu_ctx_switch(void **save_sp, void *sp);
__asm__(".text\n"
        ".globl emu_ctx_switch\n"
        ".type emu_ctx_switch, @function\n"
        "emu_ctx_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size emu_ctx_switch, .-emu_ctx_switch\n");
void ctx_switch(ctx_t *from, ctx_t *to) { emu_ctx_switch(&from->sp, to->sp); }
/* A fresh stack that "returns" into fiber_main with the alignment of a function entry. */
void ctx_make(ctx_t *c, char *stack, size_t bytes) {
  uintptr_t top = ((uintptr_t)stack + bytes) & ~(uintptr_t)15;
  void **sp = (void **)top;
  *--sp = NULL;                  /* fiber_main's return address: it never returns */
  *--sp = (void *)&fiber_main;   /* where emu_ctx_switch's ret goes */
  for (int i = 0; i < 6; i++) *--sp = NULL; /* the callee-saved registers it pops */
  c->sp = sp;
}
#else
typedef ucontext_t ctx_t;
void ctx_switch(ctx_t *from, ctx_t *to) {
  if (swapcontext(from, to) != 0) emu_die("swapcontext failed");
}
void ctx_make(ctx_t *c, char *stack, size_t bytes) {
  if (getcontext(c) != 0) emu_die("getcontext failed");
  c->uc_stack.ss_sp = stack;
  c->uc_stack.ss_size = bytes;
  c->uc_link = NULL;
  makecontext(c, fiber_main, 0);
}
#endif

enum state { RUNNABLE, WAIT_BLOCK, WAIT_WARP, DONE };

const size_t STACK_BYTES = 256 * 1024; /* kernels keep per-thread tile rows in local arrays */

struct fiber {
  ctx_t ctx;
  char *stack;
  state st;
};

struct launch {
  std::vector<fiber> fibers;
  std::vector<uint64_t> slots;
  std::vector<unsigned char> smem;
  ctx_t sched;
  unsigned nthreads, cur;
  void (*body)(void *);
  void *arg;
  const char *name;
  bool direct;       /* threads run as plain calls, one after another (see emu_run) */
  unsigned long long block; /* blocks run so far: static shared memory is refilled once per block */
  std::map<void *, unsigned long long> fresh; /* static shared memory: the block that last filled it */
  bool barrier_seen; /* some thread of this launch waited at a barrier */
};

launch &L = *new launch(); /* never destroyed: fibers may still be in use while exit() runs */

void set_thread(unsigned t) {
  L.cur = t;
  threadIdx.x = t % blockDim.x;
  threadIdx.y = (t / blockDim.x) % blockDim.y;
  threadIdx.z = t / (blockDim.x * blockDim.y);
}

void fiber_main(void) {
  L.body(L.arg);
  L.fibers[L.cur].st = DONE;
  ctx_switch(&L.fibers[L.cur].ctx, &L.sched); /* never resumed */
  emu_die("a finished fiber was resumed");
}

void wait_here(state s) {
  if (L.direct)
    emu_die("kernel %s reached a barrier in a launch run without fibers: its earlier launches never did "
            "(run with SCDINO_EMU_FIBERS=always)", L.name);
  L.barrier_seen = true;
  fiber &f = L.fibers[L.cur];
  f.st = s;
  ctx_switch(&f.ctx, &L.sched);
}

const char *state_name(state s) {
  return s == WAIT_BLOCK ? "__syncthreads" : s == WAIT_WARP ? "warp barrier" : s == DONE ? "returned" : "running";
}

/* Threads [lo, hi) cannot all meet: say who is where, and stop. */
[[noreturn]] void divergent(unsigned lo, unsigned hi, const char *why) {
  fprintf(stderr, "cuda emulator: kernel %s, block (%u,%u,%u), threads %u-%u: %s:", L.name, blockIdx.x,
          blockIdx.y, blockIdx.z, lo, hi - 1, why);
  int shown = 0;
  state prev = RUNNABLE;
  for (unsigned t = lo; t < hi && shown < 12; t++)
    if (t == lo || L.fibers[t].st != prev) {
      prev = L.fibers[t].st;
      fprintf(stderr, " %u %s,", t, state_name(prev));
      shown++;
    }
  fprintf(stderr, " ...\n");
  exit(99);
}

/* Open the warp barrier of the warp starting at thread w if all its lanes have reached it. */
bool release_warp(unsigned w) {
  const unsigned end = w + 32 < L.nthreads ? w + 32 : L.nthreads;
  unsigned wwait = 0, wdone = 0;
  for (unsigned t = w; t < end; t++) {
    wwait += L.fibers[t].st == WAIT_WARP;
    wdone += L.fibers[t].st == DONE;
  }
  if (!wwait || wwait + wdone != end - w) return false;
  if (wdone) divergent(w, end, "some lanes returned while others wait at a warp shuffle or __syncwarp");
  for (unsigned t = w; t < end; t++) L.fibers[t].st = RUNNABLE;
  return true;
}

/* Open the barriers that every participant has reached; returns whether any opened. */
bool release(void) {
  unsigned waiting = 0, done = 0;
  for (unsigned t = 0; t < L.nthreads; t++) {
    waiting += L.fibers[t].st == WAIT_BLOCK;
    done += L.fibers[t].st == DONE;
  }
  if (waiting && waiting + done == L.nthreads) {
    if (done) divergent(0, L.nthreads, "some threads returned while others wait at __syncthreads");
    for (unsigned t = 0; t < L.nthreads; t++) L.fibers[t].st = RUNNABLE;
    return true;
  }
  bool opened = false;
  for (unsigned w = 0; w < L.nthreads; w += 32) opened |= release_warp(w);
  return opened;
}

/* SCDINO_EMU_ORDER=reverse runs the blocks of a grid, the warps of a block and the lanes of a warp
 * last first, and each warp on through its warp barriers until it waits at __syncthreads or returns
 * (the default, forward, runs every thread to its next barrier, of either kind, before any opens).
 * A kernel that reads what another thread writes without a barrier between them, or rewrites what
 * another warp has still to read, or counts on blocks running in order, then sees other values in
 * one of the two orders. */
bool reverse_order(void) {
  static int v = -1;
  if (v < 0) {
    const char *e = getenv("SCDINO_EMU_ORDER");
    if (e && *e && strcmp(e, "forward") && strcmp(e, "reverse"))
      emu_die("SCDINO_EMU_ORDER=%s (forward or reverse)", e);
    v = e && !strcmp(e, "reverse");
  }
  return v;
}

/* The i-th of n in the order of SCDINO_EMU_ORDER. */
unsigned nth(unsigned i, unsigned n) { return reverse_order() ? n - 1 - i : i; }

void run_block(void) {
  for (unsigned t = 0; t < L.nthreads; t++) {
    fiber &f = L.fibers[t];
    ctx_make(&f.ctx, f.stack, STACK_BYTES);
    f.st = RUNNABLE;
  }
  const unsigned nwarps = (L.nthreads + 31) / 32;
  for (;;) {
    bool ran = false;
    if (reverse_order()) {
      for (unsigned wi = 0; wi < nwarps; wi++) {
        const unsigned w = nth(wi, nwarps) * 32, n = L.nthreads - w < 32 ? L.nthreads - w : 32;
        do {
          for (unsigned i = 0; i < n; i++) {
            const unsigned t = w + nth(i, n);
            if (L.fibers[t].st != RUNNABLE) continue;
            set_thread(t);
            ctx_switch(&L.sched, &L.fibers[t].ctx);
            ran = true;
          }
        } while (release_warp(w));
      }
    } else {
      for (unsigned t = 0; t < L.nthreads; t++) {
        if (L.fibers[t].st != RUNNABLE) continue;
        set_thread(t);
        ctx_switch(&L.sched, &L.fibers[t].ctx);
        ran = true;
      }
    }
    bool done = true;
    for (unsigned t = 0; t < L.nthreads && done; t++) done = L.fibers[t].st == DONE;
    if (done) return;
    if (!release() && !ran) divergent(0, L.nthreads, "threads wait at barriers that cannot all open");
  }
}

} // namespace

unsigned emu_tid(void) { return L.cur; }
void emu_syncthreads(void) { wait_here(WAIT_BLOCK); }
void emu_syncwarp(void) { wait_here(WAIT_WARP); }
/* 128-byte aligned, as the GPU's (the wmma loads need 32) */
void *emu_dynamic_smem(void) { return (void *)(((uintptr_t)L.smem.data() + 127) & ~(uintptr_t)127); }

float *nvcuda::wmma::emu_wmma_buffer(void) {
  static float buf[32][3 * 256]; /* one per warp of the running block */
  return buf[(L.cur / 32) % 32];
}

void nvcuda::wmma::emu_wmma_check(const void *p, unsigned ldm, size_t esize, const char *what) {
  if ((uintptr_t)p % 32)
    emu_die("kernel %s: wmma::%s at %p: the pointer must be 256-bit aligned", L.name, what, p);
  if ((ldm * esize) % 16)
    emu_die("kernel %s: wmma::%s with ldm %u: a multiple of 16 bytes is required", L.name, what, ldm);
}
uint64_t *emu_shfl_slots(void) { return L.slots.data(); }

void emu_shared_fresh(void *p, size_t n) {
  unsigned long long &b = L.fresh[p];
  if (b == L.block + 1) return; /* filled for this block (+1: map entries start at 0) */
  memset(p, 0xff, n);
  b = L.block + 1;
}

namespace {
void run_kernel(const emu_config &c, const char *name, const void *kernel, void (*body)(void *), void *arg);
}

void emu_run(const emu_config &c, const char *name, const void *kernel, void (*body)(void *), void *arg,
             void (*drop)(void *)) {
  const unsigned long long nthreads = (unsigned long long)c.block.x * c.block.y * c.block.z;
  const unsigned long long nblocks = (unsigned long long)c.grid.x * c.grid.y * c.grid.z;
  if (nthreads == 0 || nthreads > 1024 || c.block.z > 64 || nblocks == 0 || c.grid.y > 65535 ||
      c.grid.z > 65535) {
    emu_launch_error(cudaErrorInvalidConfiguration, name, "grid (%u,%u,%u), block (%u,%u,%u)", c.grid.x,
                     c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z);
    drop(arg);
    return;
  }
  const size_t limit = emu_smem_limit(kernel);
  if (c.smem > limit) {
    emu_launch_error(cudaErrorInvalidValue, name, "%zu bytes of dynamic shared memory, the kernel may have %zu",
                     c.smem, limit);
    drop(arg);
    return;
  }
  const emu_config cc = c;
  emu_enqueue(c.stream, [cc, name, kernel, body, arg, drop] {
    run_kernel(cc, name, kernel, body, arg);
    drop(arg);
  });
}

namespace {
void run_kernel(const emu_config &c, const char *name, const void *kernel, void (*body)(void *), void *arg) {
  const unsigned long long nthreads = (unsigned long long)c.block.x * c.block.y * c.block.z;
  const unsigned long long nblocks = (unsigned long long)c.grid.x * c.grid.y * c.grid.z;
  if (L.fibers.size() < nthreads) {
    const size_t old = L.fibers.size();
    L.fibers.resize(nthreads);
    for (size_t t = old; t < nthreads; t++) L.fibers[t].stack = (char *)malloc(STACK_BYTES);
  }
  L.slots.assign(nthreads, 0);
  /* Filled with a pattern, so reading shared memory no thread wrote shows up in the results. */
  L.smem.assign(c.smem + 16 + 128, 0xff);
  L.nthreads = (unsigned)nthreads;
  L.body = body;
  L.arg = arg;
  L.name = name;
  /* A kernel whose first launch had no thread wait at a barrier runs its later launches without
   * fibers (most of the backend's kernels are elementwise): each thread is a plain call.  Should
   * such a kernel reach a barrier after all, the launch stops with a message. */
  static std::map<const void *, bool> *barrier_free;
  if (!barrier_free) barrier_free = new std::map<const void *, bool>();
  static const char *always = getenv("SCDINO_EMU_FIBERS");
  auto known = barrier_free->find(kernel);
  L.direct = known != barrier_free->end() && known->second && !(always && !strcmp(always, "always"));
  L.barrier_seen = false;
  blockDim = c.block;
  gridDim = c.grid;
  for (unsigned z = 0; z < c.grid.z; z++)
    for (unsigned y = 0; y < c.grid.y; y++)
      for (unsigned x = 0; x < c.grid.x; x++) {
        blockIdx.x = nth(x, c.grid.x);
        blockIdx.y = nth(y, c.grid.y);
        blockIdx.z = nth(z, c.grid.z);
        /* each block's shared memory starts undefined, not as the previous block left it */
        if (c.smem) memset(L.smem.data(), 0xff, L.smem.size());
        L.block++;
        if (L.direct) {
          for (unsigned i = 0; i < L.nthreads; i++) {
            set_thread(nth(i, L.nthreads));
            body(arg);
          }
        } else {
          run_block();
        }
      }
  if (!L.direct) (*barrier_free)[kernel] = !L.barrier_seen;
  L.direct = false;
  emu_count_launch(name, nblocks, nthreads);
}
} // namespace
