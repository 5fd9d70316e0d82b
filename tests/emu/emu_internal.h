/* emu_internal.h - what the CPU emulator's own files share (tests/emu/). */
#ifndef SCDINO_EMU_INTERNAL_H
#define SCDINO_EMU_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include <functional>

/* End the program: the emulator itself cannot go on. */
[[noreturn]] void emu_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Record a launch error for cudaGetLastError (with a message on stderr naming the kernel). */
void emu_launch_error(cudaError_t e, const char *kernel, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Dynamic shared memory a kernel may use: 48 KiB, or what cudaFuncSetAttribute allowed. */
size_t emu_smem_limit(const void *kernel);
/* Whether [p, p + n) lies wholly inside one device allocation. */
int emu_in_device_memory(const void *p, size_t n);
/* Queue work on stream s (runtime.cc: it runs when the stream is forced; at once with
 * SCDINO_EMU_STREAMS=sync), and run everything queued on s (and what that waits for). */
void emu_enqueue(cudaStream_t s, std::function<void()> work);
void emu_stream_force(cudaStream_t s);
/* Statistics for the summary printed at exit (SCDINO_EMU_STATS=1). */
void emu_count_launch(const char *kernel, unsigned long long blocks, unsigned long long threads);

#endif
