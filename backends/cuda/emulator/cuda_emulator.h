// cuda_emulator.h - run generated CUDA (.cu) source on the CPU, for tests without a GPU.
//
// WHAT IT EMULATES
//   The CUDA C++ subset used by the partitioner's generated kernels: execution-space
//   qualifiers, built-in index variables, __shared__ memory (static and dynamic),
//   __syncthreads()/__syncwarp(), warp shuffles and votes, atomics, __half and
//   __nv_bfloat16 (bit-exact IEEE round-to-nearest-even conversions), CUDA-style min/max
//   and a few intrinsics, CUDA-aligned vector types, and nvcuda::wmma for the half and
//   bfloat16 shapes (m16n16k16, m32n8k16, m8n32k16) with float (or half) accumulators.
//   Compile the SAME .cu file with
//       g++ -std=c++17 -DPARTITION_EMULATOR -I backends/cuda/emulator -x c++ x.cu
//   where the source includes this header instead of cuda_fp16.h/cuda_bf16.h/mma.h.
//
// EXECUTION MODEL
//   emu::launch(kernel, dim3 grid, dim3 block, size_t dynamic_smem_bytes, args...) is
//   synchronous: blocks run one after another (x fastest, then y, then z). The threads
//   of a block are cooperative fibers (ucontext: makecontext/swapcontext), one stack
//   per thread, allocated once per launch (with a PROT_NONE guard region below each
//   stack) and reused by every block. A fiber runs until it waits at a barrier or
//   returns; a round-robin scheduler then resumes the next one. Consequences:
//   * Code between two barriers runs without interruption, so plain read-modify-write
//     is atomic (the atomics are plain RMW) and fences are no-ops.
//   * __shared__ expands to `static`: one copy per kernel (per template instance),
//     shared by the threads of the running block. It is NOT reset between blocks or
//     launches (CUDA leaves it undefined too); initialise it before use.
//   * Dynamic shared memory: call emu_dynamic_smem() (16-byte aligned, one buffer per
//     launch, refilled with the byte EMU_SMEM_POISON (default 0xFF: NaN/-1) before every
//     block to expose reads of uninitialised data; -DEMU_SMEM_POISON=-1 disables it).
//     `extern __shared__ T smem[];` does not compile here (extern static); write
//         #ifdef PARTITION_EMULATOR
//           unsigned char* smem = emu_dynamic_smem();
//         #else
//           extern __shared__ __align__(16) unsigned char smem[];
//         #endif
//   * __syncthreads() is a reusable barrier over all threads of the block. If a thread
//     reaches it after another thread of the block returned, or returns while others
//     wait at it, the program prints a diagnostic to stderr and exits with status 134.
//     A state where every live thread waits and none can proceed (e.g. half of a warp
//     at a shuffle, the other half at __syncthreads) is reported as a deadlock.
//   * emu::sample_blocks({linear indices}) makes later launches run only those blocks
//     (to sample a large grid); an empty list runs every block again.
//   * Warp collectives (__shfl*_sync, votes, __syncwarp, wmma load/store) exchange
//     values through a per-warp buffer between two barriers over the warp's lanes.
//     Warp w holds linear threads 32w..32w+31 (linear = x + y*Dx + z*Dx*Dy); the last
//     warp of a block whose size is not a multiple of 32 is partial and its collectives
//     involve only the existing lanes (a shuffle from a missing lane returns the
//     caller's own value; CUDA leaves that undefined).
//
// COUNTERS (-DEMU_PROFILE)
//   Compiled with -DEMU_PROFILE, the emulator counts what Nsight Compute counts for the
//   accesses a kernel names with EMU_ACCESS(kind, lvalue) (partition_runtime.cuh's
//   PART_LDG/PART_STG/PART_LDS/PART_STS: global and shared loads and stores) and for WMMA
//   loads and stores, which it models (see nvcuda::wmma::detail). Without the define
//   nothing of it is compiled.
//   * A request is one warp-level execution of an access: lane k's n-th execution of the
//     site since its warp last converged (a __syncthreads, a warp collective, the end of
//     the block) pairs with the other lanes' n-th. The lanes present form its mask.
//   * Global memory: its sectors are the distinct 32-byte aligned segments its lanes
//     touch, its ideal ceil(distinct bytes / 32) sectors.
//   * Shared memory: 32 banks of 4 bytes. Per phase (the warp for accesses of up to 4
//     bytes, each half-warp for 8 bytes, each quarter-warp for 16) as many wavefronts as
//     the most distinct 4-byte words one bank holds (lanes on one word: a broadcast);
//     its ideal is the number of phases with an active lane.
//   * Warp-level instructions, once per warp: barriers (per __syncthreads), __syncwarp,
//     shuffles, votes, mma (wmma::mma_sync; part_mma counts itself).
//   EMU_REGION("name") names the accesses of the enclosing scope (the innermost wins).
//   emu::prof::write(path) writes, tab-separated, per launch a line
//     launch <i> <blocks run> <blocks of the grid> barriers=<n> warp_syncs=<n> shuffles=<n> votes=<n> mma=<n>
//   and per (site, region) of it a line
//     site <i> <ldg|stg|lds|sts> <file> <line> <region> <requests> <sectors|wavefronts> <ideal> <bytes> <text>
//   Addresses are the host's: place global buffers as cudaMalloc does (256-byte aligned),
//   or sector counts shift.
//
// LIMITS (what a template writer must know)
//   * Masks: only full-warp masks are supported. Every live lane of the warp must take
//     part in a warp collective; a mask that leaves out an existing lane, or a
//     collective after a lane of the warp returned, aborts with a message.
//   * Kernels are launched with emu::launch(...), not <<<...>>>; there are no streams,
//     no dynamic parallelism, no cooperative groups, no texture/surface memory.
//     A few host API stubs (cudaMalloc/cudaMemcpy/cudaMemcpyToSymbol/cudaFree/...)
//     map to malloc/memcpy. No __half2/__nv_bfloat162 types, no half intrinsics beyond
//     the conversions, __hisnan/__hisinf/__habs/__hneg and the C++ operators.
//   * `extern __shared__` and `static __shared__` do not compile (see above).
//   * Stack: EMU_FIBER_STACK_SIZE bytes per thread (default 64 KiB; e.g.
//     -DEMU_FIBER_STACK_SIZE=262144). Overflow into the guard region is reported as
//     "fiber stack overflow" (a SIGSEGV handler on an alternate stack is installed).
//   * Faults: SIGSEGV, SIGBUS, SIGFPE and SIGILL are reported on stderr with the label
//     last given to emu::set_label (e.g. the kernel's name), the block and the thread,
//     and then kill the process as usual (exit by that signal).
//     A WMMA float accumulator fragment takes 1 KiB of stack per thread here.
//   * __CUDA_ARCH__ / __CUDACC__ are not defined. Not usable with -fsanitize=address.
//   * WMMA: each lane holds the WHOLE tile (num_elements == rows*cols of the operand,
//     x[] stored row-major: x[r*cols + c]) and computes the whole product, so code that
//     applies the same elementwise operation to x[] in every lane stays consistent.
//     CUDA leaves the element-to-lane mapping unspecified, so portable code never
//     depends on it. mma_sync multiplies in float and accumulates in float, k ascending,
//     starting from c.
//   * Half/bfloat16 NaN: conversions keep a NaN a NaN (float->half truncates the
//     payload like numpy; float->bfloat16 gives the canonical 0x7FC0 like ml_dtypes);
//     the hardware returns other NaN bit patterns, so never compare NaN bits.
//   * A swapcontext costs about 0.3 us (it also saves the signal mask with a system
//     call); a barrier resumes every waiting fiber once (two switches per thread), so
//     a block of 256 threads passes about 6000 __syncthreads() per second.
//   * __activemask() reports every existing lane of the warp (warps are assumed
//     converged). __align__(n) is __attribute__((aligned(n))), so both
//     `__shared__ __align__(16) T x[N]` and `__align__(16) __shared__ T x[N]` work.
//   * g++ needs `-x c++` to compile a file named .cu, and warns about `#pragma unroll`
//     under -Wall (add -Wno-unknown-pragmas). emu::launch takes the kernel as a function
//     pointer: a kernel named like a std function (reverse, rotate, ...) is ambiguous
//     after `using namespace std`.
#ifndef PARTITION_CUDA_EMULATOR_H
#define PARTITION_CUDA_EMULATOR_H

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <math.h>  // the C++ wrapper also puts the float overloads (sqrt(float), ...) in ::
#include <memory>  // before __noinline__ is defined: libstdc++ uses __attribute__((__noinline__))
#include <signal.h>
#include <sys/mman.h>
#include <type_traits>
#include <ucontext.h>
#include <unistd.h>
#include <utility>
#include <vector>
#ifdef EMU_PROFILE
#include <map>
#include <string>
#endif

#ifndef EMU_FIBER_STACK_SIZE
#define EMU_FIBER_STACK_SIZE (64 * 1024)
#endif
#ifndef EMU_SMEM_POISON
#define EMU_SMEM_POISON 0xFF
#endif

// ---------------------------------------------------------------- qualifiers
#define __global__
#define __device__
#define __host__
#define __constant__
#define __shared__ static
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))  // alignas cannot follow `static`
// __restrict__ is a GCC keyword already.

// ---------------------------------------------------------------- built-in types
struct uint3 { unsigned x, y, z; };
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return {x, y, z}; }
};

#define EMU_VEC2(T, N, A) \
  struct alignas(A) N##2 { T x, y; }; \
  inline N##2 make_##N##2(T x, T y) { return {x, y}; }
#define EMU_VEC3(T, N) \
  struct N##3 { T x, y, z; }; \
  inline N##3 make_##N##3(T x, T y, T z) { return {x, y, z}; }
#define EMU_VEC4(T, N, A) \
  struct alignas(A) N##4 { T x, y, z, w; }; \
  inline N##4 make_##N##4(T x, T y, T z, T w) { return {x, y, z, w}; }
EMU_VEC2(int, int, 8) EMU_VEC3(int, int) EMU_VEC4(int, int, 16)
EMU_VEC2(unsigned, uint, 8) EMU_VEC4(unsigned, uint, 16)
EMU_VEC2(float, float, 8) EMU_VEC3(float, float) EMU_VEC4(float, float, 16)
EMU_VEC2(double, double, 16)
inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return {x, y, z}; }
#undef EMU_VEC2
#undef EMU_VEC3
#undef EMU_VEC4

// ---------------------------------------------------------------- counter hooks
#ifdef EMU_PROFILE
// The engine tells the counters (defined after it; COUNTERS above) when requests
// complete: at every barrier, every warp collective and the end of every block.
namespace emu {
namespace prof {
enum Op { BARRIER, WARP_SYNC, SHUFFLE, VOTE, MMA, OPS };
inline void launch_begin(dim3 grid, unsigned threads);
inline void block_end();
inline void barrier_done(int warps);
inline void warp_done(int warp);
inline void warp_op(Op op);
}  // namespace prof
}  // namespace emu
#endif

// ---------------------------------------------------------------- the engine
namespace emu {
namespace detail {

// What the program is running, named by the host code (emu::set_label) and printed by
// every failure report: which kernel failed, not only how.
inline const char* g_label = nullptr;

[[noreturn]] inline void fail(const char* fmt, ...) {
  std::fflush(stdout);
  std::fputs("cuda_emulator: ", stderr);
  if (g_label) std::fprintf(stderr, "%s: ", g_label);
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
  std::fflush(stderr);
  std::_Exit(134);
}

struct Warp {
  int size = 0, arrived = 0;
  unsigned gen = 0, all_mask = 0, exited_mask = 0;
  alignas(16) unsigned char buf[32][16];  // one slot per lane for exchanges
  alignas(16) unsigned char wide[32][64];  // one slot per lane for emu::warp_allgather
};

// A 16-byte asynchronous copy (cp.async) not yet landed: its data, read at issue, and the
// commit group it belongs to (emu::cp_async).
struct AsyncCopy {
  unsigned char* dst;
  unsigned char data[16];
  unsigned group;
};

struct Launch {
  ucontext_t sched;                 // the scheduler's context
  std::vector<std::vector<AsyncCopy>> copies;  // per thread: issued, not yet landed
  std::vector<unsigned> committed;  // per thread: commit groups closed so far
  std::vector<ucontext_t> ctx;      // one per thread; never reallocated (self-pointers)
  std::vector<uint3> tid;
  std::vector<char> done;
  std::vector<Warp> warps;
  int n = 0, cur = 0, exited = 0, arrived = 0, bar_count = 0, bar_result = 0;
  unsigned gen = 0;
  unsigned long long progress = 0;  // bumped by every arrival and exit (deadlock check)
  void (*thunk)(void*) = nullptr;
  void* arg = nullptr;
  unsigned char* smem = nullptr;
  size_t smem_bytes = 0;
};

inline Launch* g_launch = nullptr;
// Linear indices (x fastest) of the blocks launches run (emu::sample_blocks); empty: all.
inline std::vector<unsigned long long> g_sample;
inline uint3 g_thread{0, 0, 0}, g_block{0, 0, 0};
inline dim3 g_bdim, g_gdim;
// Stack region of the running launch, read by the SIGSEGV handler.
inline unsigned char* g_stacks = nullptr;
inline size_t g_stacks_bytes = 0, g_stride = 0, g_guard = 0;

inline Launch& cur() {
  if (!g_launch) fail("a device-side function was called outside emu::launch");
  return *g_launch;
}
inline void yield() {
  Launch& l = *g_launch;
  swapcontext(&l.ctx[l.cur], &l.sched);
}
inline void compiler_fence() { asm volatile("" ::: "memory"); }

#define EMU_WHERE "block (%u,%u,%u) thread (%u,%u,%u)"
#define EMU_WHERE_ARGS g_block.x, g_block.y, g_block.z, g_thread.x, g_thread.y, g_thread.z

// Barrier over the whole block; returns the number of threads that passed pred != 0.
inline int block_barrier(int pred) {
  Launch& l = cur();
  compiler_fence();
  if (l.exited)
    fail("__syncthreads(): " EMU_WHERE " reached a barrier after %d thread(s) of its block "
         "returned (divergent barrier: every thread of the block must reach it)",
         EMU_WHERE_ARGS, l.exited);
  unsigned g = l.gen;
  ++l.progress;
  l.bar_count += pred != 0;
  if (++l.arrived == l.n) {
    l.arrived = 0;
    l.bar_result = l.bar_count;  // safe: rewritten only when every thread passed again
    l.bar_count = 0;
    ++l.gen;
#ifdef EMU_PROFILE
    prof::barrier_done(int(l.warps.size()));
#endif
  } else {
    while (l.gen == g) yield();
  }
  compiler_fence();
  return l.bar_result;
}

// Barrier over the existing lanes of the caller's warp.
inline void warp_barrier(unsigned mask, const char* what) {
  Launch& l = cur();
  Warp& w = l.warps[l.cur >> 5];
  compiler_fence();
  if ((mask & w.all_mask) != w.all_mask)
    fail("%s: " EMU_WHERE ": mask 0x%08x leaves out lanes of its warp (existing lanes 0x%08x); "
         "the emulator supports full-warp masks only", what, EMU_WHERE_ARGS, mask, w.all_mask);
  if (w.exited_mask)
    fail("%s: " EMU_WHERE ": warp collective after lanes 0x%08x of the warp returned",
         what, EMU_WHERE_ARGS, w.exited_mask);
  unsigned g = w.gen;
  ++l.progress;
  if (++w.arrived == w.size) {
    w.arrived = 0;
    ++w.gen;
#ifdef EMU_PROFILE
    prof::warp_done(l.cur >> 5);
#endif
  } else {
    while (w.gen == g) yield();
  }
  compiler_fence();
}

inline Warp& my_warp() { return cur().warps[g_launch->cur >> 5]; }
inline int my_lane() { return cur().cur & 31; }

// Shuffle following PTX shfl.sync: mode 0 idx, 1 up, 2 down, 3 bfly.
template <class T>
T shfl(unsigned mask, T v, int mode, int b, int width, const char* what) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 16,
                "emulated shuffles need a trivially copyable type of at most 16 bytes");
  if (width < 1 || width > 32 || (width & (width - 1)))
    fail("%s: width %d is not a power of two in [1, 32]", what, width);
  Warp& w = my_warp();
  int lane = my_lane();
  std::memcpy(w.buf[lane], &v, sizeof(T));
  warp_barrier(mask, what);
  int seg = 32 - width, bv = b & 31;
  int first = lane & seg, last = first | (31 & ~seg);
  int j;
  bool ok;
  switch (mode) {
    case 0: j = first | (bv & ~seg); ok = true; break;
    case 1: j = lane - bv; ok = j >= first; break;
    case 2: j = lane + bv; ok = j <= last; break;
    default: j = lane ^ bv; ok = j <= last; break;
  }
  if (!ok || j >= w.size) j = lane;
#ifdef EMU_PROFILE
  prof::warp_op(prof::SHUFFLE);
#endif
  T r;
  std::memcpy(&r, w.buf[j], sizeof(T));
  warp_barrier(mask, what);  // nobody rewrites the buffer before every lane has read it
  return r;
}

// Vote: returns the mask of existing lanes whose predicate is non-zero.
inline unsigned ballot(unsigned mask, int pred, const char* what) {
  Warp& w = my_warp();
  int lane = my_lane();
  int p = pred != 0;
  std::memcpy(w.buf[lane], &p, sizeof p);
  warp_barrier(mask, what);
#ifdef EMU_PROFILE
  prof::warp_op(prof::VOTE);
#endif
  unsigned r = 0;
  for (int i = 0; i < w.size; ++i) {
    int q;
    std::memcpy(&q, w.buf[i], sizeof q);
    r |= unsigned(q) << i;
  }
  warp_barrier(mask, what);
  return r;
}

inline void fiber_main() {
  Launch& l = *g_launch;
  l.thunk(l.arg);
  int i = l.cur;
  Warp& w = l.warps[i >> 5];
  l.done[i] = 1;
  ++l.exited;
  ++l.progress;
  w.exited_mask |= 1u << (i & 31);
  if (l.arrived)
    fail("__syncthreads(): " EMU_WHERE " returned while %d thread(s) of its block wait at a "
         "barrier (divergent barrier: every thread of the block must reach it)",
         EMU_WHERE_ARGS, l.arrived);
  if (w.arrived)
    fail("warp collective: " EMU_WHERE " returned while %d lane(s) of its warp wait at a "
         "warp collective", EMU_WHERE_ARGS, w.arrived);
  setcontext(&l.sched);
}

// Async-signal-safe text for the fault report (no stdio inside a signal handler).
struct FaultText {
  char buf[512];
  size_t n = 0;
  void add(const char* s) { while (*s && n < sizeof buf - 1) buf[n++] = *s++; }
  void add(unsigned long long v) {
    char digits[24];
    int k = 0;
    do digits[k++] = char('0' + v % 10); while ((v /= 10) && k < 24);
    while (k && n < sizeof buf - 1) buf[n++] = digits[--k];
  }
  void add3(const char* what, unsigned x, unsigned y, unsigned z) {
    add(what); add(" ("); add(x); add(","); add(y); add(","); add(z); add(")");
  }
};

inline const char* fault_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV (invalid memory access)";
    case SIGBUS: return "SIGBUS (misaligned or unmapped memory access)";
    case SIGFPE: return "SIGFPE (integer division by zero or overflow)";
    case SIGILL: return "SIGILL (illegal instruction)";
    default: return "fatal signal";
  }
}

// A fault: a fiber that ran off its stack, or a kernel (or the host program) that touched
// memory it does not own. Reports what faulted, in which kernel (emu::set_label) and in
// which block and thread, then lets the signal kill the process as it would have.
inline void fault_handler(int sig, siginfo_t* si, void*) {
  auto* a = static_cast<unsigned char*>(si->si_addr);
  FaultText t;
  t.add("cuda_emulator: ");
  if (g_label) { t.add(g_label); t.add(": "); }
  const bool overflow = sig == SIGSEGV && g_stacks && a >= g_stacks && a < g_stacks + g_stacks_bytes &&
                        size_t(a - g_stacks) % g_stride < g_guard;
  if (overflow) {
    t.add("fiber stack overflow: a GPU thread used more than EMU_FIBER_STACK_SIZE bytes of stack "
          "(compile with e.g. -DEMU_FIBER_STACK_SIZE=262144)");
  } else {
    t.add(fault_name(sig));
  }
  if (g_launch) {
    t.add3(" in block", g_block.x, g_block.y, g_block.z);
    t.add3(" thread", g_thread.x, g_thread.y, g_thread.z);
  }
  t.add("\n");
  ssize_t ignored = write(2, t.buf, t.n);
  (void)ignored;
  if (overflow) _exit(134);
  signal(sig, SIG_DFL);  // the faulting instruction repeats and the signal kills the process
}

inline void install_fault_handler() {
  static bool done = false;
  if (done) return;
  done = true;
  static unsigned char altstack[64 * 1024];
  stack_t ss{};
  ss.ss_sp = altstack;
  ss.ss_size = sizeof altstack;
  sigaltstack(&ss, nullptr);
  struct sigaction sa{};
  sa.sa_sigaction = fault_handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) sigaction(sig, &sa, nullptr);
}

// Kept out of run(): getcontext returns twice, which would pessimise the caller.
__attribute__((noinline)) inline void init_fiber(ucontext_t& c, void* sp, size_t size,
                                                 ucontext_t* link) {
  getcontext(&c);
  c.uc_stack.ss_sp = sp;
  c.uc_stack.ss_size = size;
  c.uc_link = link;
  makecontext(&c, fiber_main, 0);
}

inline void run(dim3 grid, dim3 block, size_t smem_bytes, void (*thunk)(void*), void* arg) {
  if (g_launch) fail("emu::launch called from device code (dynamic parallelism is unsupported)");
  unsigned long long n = 1ull * block.x * block.y * block.z;
  if (n == 0 || n > 1024 || block.z > 64)
    fail("emu::launch: invalid block (%u,%u,%u): 1 to 1024 threads, z <= 64", block.x, block.y,
         block.z);
  if (!grid.x || !grid.y || !grid.z || grid.y > 65535 || grid.z > 65535)
    fail("emu::launch: invalid grid (%u,%u,%u)", grid.x, grid.y, grid.z);
  Launch l;
  l.n = int(n);
  l.thunk = thunk;
  l.arg = arg;
  l.ctx.resize(n);
  l.done.assign(n, 0);
  l.copies.resize(n);
  l.committed.assign(n, 0);
  l.tid.resize(n);
  for (unsigned i = 0; i < n; ++i)
    l.tid[i] = {i % block.x, i / block.x % block.y, unsigned(i / (block.x * block.y))};
  l.warps.resize((n + 31) / 32);
  for (size_t w = 0; w < l.warps.size(); ++w) {
    l.warps[w].size = int(std::min<unsigned long long>(32, n - 32 * w));
    l.warps[w].all_mask = l.warps[w].size == 32 ? ~0u : (1u << l.warps[w].size) - 1;
  }
  // Stacks: [guard | stack] per thread, one mapping for the launch.
  size_t page = size_t(sysconf(_SC_PAGESIZE));
  size_t stack = (size_t(EMU_FIBER_STACK_SIZE) + page - 1) / page * page;
  size_t guard = std::max<size_t>(page, 64 * 1024);  // also catches frames that skip a page
  size_t stride = guard + stack, bytes = stride * n;
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map == MAP_FAILED) fail("emu::launch: cannot map %zu bytes of fiber stacks", bytes);
  auto* stacks = static_cast<unsigned char*>(map);
  for (unsigned i = 0; i < n; ++i) mprotect(stacks + i * stride, guard, PROT_NONE);
  g_stacks = stacks, g_stacks_bytes = bytes, g_stride = stride, g_guard = guard;
  install_fault_handler();
  l.smem_bytes = smem_bytes;
  l.smem = static_cast<unsigned char*>(std::aligned_alloc(16, (smem_bytes + 31) / 16 * 16));
  if (!l.smem) fail("emu::launch: cannot allocate %zu bytes of dynamic shared memory", smem_bytes);

  g_launch = &l;
  g_bdim = block;
  g_gdim = grid;
#ifdef EMU_PROFILE
  prof::launch_begin(grid, unsigned(n));
#endif
  const unsigned long long blocks = 1ull * grid.x * grid.y * grid.z;
  const size_t runs = g_sample.empty() ? size_t(blocks) : g_sample.size();
  for (size_t b = 0; b < runs; ++b) {
    const unsigned long long linear = g_sample.empty() ? b : g_sample[b];
    if (linear >= blocks) continue;
    const unsigned bx = unsigned(linear % grid.x), by = unsigned(linear / grid.x % grid.y),
                   bz = unsigned(linear / grid.x / grid.y);
    g_block = {bx, by, bz};
    l.exited = l.arrived = l.bar_count = 0;
    for (Warp& w : l.warps) w.arrived = 0, w.exited_mask = 0;
    if (EMU_SMEM_POISON >= 0) std::memset(l.smem, EMU_SMEM_POISON & 0xFF, smem_bytes);
    for (unsigned i = 0; i < n; ++i) {
      init_fiber(l.ctx[i], stacks + i * stride + guard, stack, &l.sched);
      l.done[i] = 0;
      l.copies[i].clear();  // a previous block's copies never land in this one's memory
      l.committed[i] = 0;
    }
    int live = l.n;
    while (live) {
      unsigned long long before = l.progress;
      for (int i = 0; i < l.n; ++i) {
        if (l.done[i]) continue;
        l.cur = i;
        g_thread = l.tid[i];
        swapcontext(&l.sched, &l.ctx[i]);
        live -= l.done[i];
      }
      if (live && l.progress == before) {
        int warp_waiting = 0;
        for (Warp& w : l.warps) warp_waiting += w.arrived;
        fail("deadlock in block (%u,%u,%u): %d live thread(s) wait forever (%d at "
             "__syncthreads, %d at warp collectives): threads of a block or warp wait at "
             "different barriers", bx, by, bz, live, l.arrived, warp_waiting);
      }
    }
#ifdef EMU_PROFILE
    prof::block_end();
#endif
  }
  g_launch = nullptr;
  g_stacks = nullptr;
  std::free(l.smem);
  munmap(map, bytes);
}

}  // namespace detail

// Emulator extension for device helpers that model a warp-wide instruction (e.g. an
// mma.sync whose fragments are spread over the lanes): every lane of the warp passes
// its value and receives all of them, all[lane] from that lane. T: trivially copyable,
// at most 64 bytes. Every existing lane must call it (like any warp collective).
template <class T>
void warp_allgather(const T& mine, T* all) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 64,
                "warp_allgather takes a trivially copyable value of at most 64 bytes");
  detail::Warp& w = detail::my_warp();
  std::memcpy(w.wide[detail::my_lane()], &mine, sizeof(T));
  detail::warp_barrier(~0u, "warp_allgather");
  for (int i = 0; i < w.size; ++i) std::memcpy(&all[i], w.wide[i], sizeof(T));
  detail::warp_barrier(~0u, "warp_allgather");  // nobody rewrites a slot before every lane has read
}

// Asynchronous copies (cp.async, sm_80+), landed as late as the hardware may land them:
// cp_async(dst, src) reads 16 bytes at src now (zeros where src is null: a copy of
// source size 0) and writes them to dst only when the calling thread waits for its
// group; cp_async_commit() closes the thread's current group; cp_async_wait(pending)
// lands every copy of the thread's groups but the newest `pending` committed ones (and
// none of those, nor any copy not yet committed: cp.async.wait_group pending). A
// kernel that reads a stage before waiting for it, or waits for too few groups, reads
// stale or poisoned shared memory here, as it may on the GPU.
inline void cp_async(void* dst, const void* src) {
  detail::Launch& l = detail::cur();
  detail::AsyncCopy c{static_cast<unsigned char*>(dst), {}, l.committed[l.cur]};
  if (src) std::memcpy(c.data, src, 16);
  l.copies[l.cur].push_back(c);
}
inline void cp_async_commit() { ++detail::cur().committed[detail::g_launch->cur]; }
inline void cp_async_wait(unsigned pending) {
  detail::Launch& l = detail::cur();
  std::vector<detail::AsyncCopy>& mine = l.copies[l.cur];
  const unsigned committed = l.committed[l.cur];
  size_t kept = 0;
  for (const detail::AsyncCopy& c : mine) {
    if (c.group + pending < committed) std::memcpy(c.dst, c.data, 16);
    else mine[kept++] = c;
  }
  mine.resize(kept);
}

// Names what runs next (a kernel and its group, say) in every failure report; the
// string must outlive the launches it names. nullptr clears it.
// Launches from now on run only the blocks of these linear indices (x + y*X + z*X*Y), in
// this order, skipping those beyond the grid; an empty list runs every block again. For
// samples of large grids: a block's outputs are those of a full run only when blocks do
// not communicate (no grid-wide atomics or flags).
inline void sample_blocks(std::vector<unsigned long long> linear) { detail::g_sample = std::move(linear); }

inline void set_label(const char* label) {
  detail::install_fault_handler();
  detail::g_label = label;
}

// Run kernel<<<grid, block, dynamic_smem_bytes>>>(args...) to completion.
template <class... P, class... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t dynamic_smem_bytes,
            A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "emu::launch: wrong number of kernel arguments");
  auto call = [&] { kernel(args...); };  // every thread gets its own copy of the parameters
  detail::run(grid, block, dynamic_smem_bytes,
              [](void* c) { (*static_cast<decltype(call)*>(c))(); }, &call);
}

}  // namespace emu

// ---------------------------------------------------------------- counters (EMU_PROFILE)
#ifdef EMU_PROFILE
namespace emu {
namespace prof {
enum Kind { LDG, STG, LDS, STS, KINDS };
inline const char* const kind_names[KINDS] = {"ldg", "stg", "lds", "sts"};
inline const char* const op_names[OPS] = {"barriers", "warp_syncs", "shuffles", "votes", "mma"};

// One static access in the source (EMU_ACCESS) or in this header (WMMA): numbered when
// first executed.
struct Site {
  int kind;
  const char* label;
  const char* file;
  int line;
  int id;
};

// One request: the lanes' n-th execution of a site since the warp last converged.
struct Request {
  int region;
  unsigned size, mask;
  uintptr_t addr[32];
};
struct Totals {
  unsigned long long requests = 0, units = 0, ideal = 0, bytes = 0;
};
// Requests of one site and warp not yet counted; count[lane]: that lane's executions.
struct Pending {
  unsigned count[32] = {};
  std::vector<Request> reqs;
  size_t used = 0;
  bool listed = false;
};
struct WarpState {
  std::vector<Pending> sites;  // by site id
  std::vector<int> touched;    // ids with pending requests
};
struct LaunchTotals {
  unsigned long long blocks = 0, grid_blocks = 0, ops[OPS] = {};
  std::map<std::pair<int, int>, Totals> sites;  // (site id, region id)
};

inline std::vector<Site*> g_sites;
inline std::vector<std::string> g_regions{""};  // region 0: outside every named region
inline std::vector<WarpState> g_warps;          // of the running launch
inline std::vector<int> g_region;               // per thread of the running launch
inline std::vector<LaunchTotals> g_launches;

inline int region_id(const char* name) {
  for (size_t i = 0; i < g_regions.size(); ++i)
    if (g_regions[i] == name) return int(i);
  g_regions.push_back(name);
  return int(g_regions.size() - 1);
}

// Names the accesses of the enclosing scope (EMU_REGION); regions nest.
struct Region {
  int saved;
  explicit Region(int id) {
    int& r = g_region[emu::detail::cur().cur];
    saved = r;
    r = id;
  }
  ~Region() { g_region[emu::detail::g_launch->cur] = saved; }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
};

inline void number(Site* s) {
  if (s->id >= 0) return;
  s->id = int(g_sites.size());
  g_sites.push_back(s);
}

// Records the calling lane's access of sizeof(T) bytes at p; returns p.
template <class T>
T* access(Site* s, T* p) {
  emu::detail::Launch& l = emu::detail::cur();
  number(s);
  WarpState& w = g_warps[l.cur >> 5];
  if (w.sites.size() <= size_t(s->id)) w.sites.resize(size_t(s->id) + 1);
  Pending& pd = w.sites[s->id];
  if (!pd.listed) {
    pd.listed = true;
    w.touched.push_back(s->id);
  }
  const int lane = l.cur & 31;
  const unsigned n = pd.count[lane]++;
  if (n == pd.used) {  // the first lane at its n-th execution opens the request
    if (pd.reqs.size() <= n) pd.reqs.resize(n + 1);
    pd.reqs[n].region = g_region[l.cur];
    pd.reqs[n].size = unsigned(sizeof(T));
    pd.reqs[n].mask = 0;
    ++pd.used;
  }
  Request& r = pd.reqs[n];
  r.mask |= 1u << lane;
  r.addr[lane] = reinterpret_cast<uintptr_t>(p);
  return p;
}

// Distinct bytes of the lanes' [addr, addr + size) ranges, and (sectors) the distinct
// 32-byte aligned segments they touch.
inline unsigned long long distinct_bytes(const Request& r, unsigned long long* sectors) {
  uintptr_t lo[32];
  int n = 0;
  for (int lane = 0; lane < 32; ++lane)
    if (r.mask >> lane & 1) lo[n++] = r.addr[lane];
  std::sort(lo, lo + n);
  unsigned long long bytes = 0, count = 0;
  uintptr_t end = 0, covered = 0;  // bytes below `end` and sectors up to `covered` are counted
  bool any = false;
  for (int i = 0; i < n; ++i) {
    const uintptr_t a = lo[i], b = lo[i] + r.size;
    if (!any || a >= end) bytes += b - a;
    else if (b > end) bytes += b - end;
    uintptr_t first = a >> 5;
    const uintptr_t last = (b - 1) >> 5;
    if (any && first <= covered) first = covered + 1;  // the interval ending at `covered` began earlier
    if (first <= last) count += last - first + 1;
    if (!any || b > end) end = b;
    if (!any || last > covered) covered = last;
    any = true;
  }
  *sectors = count;
  return bytes;
}

// Shared-memory wavefronts of a request: 32 banks of 4 bytes. A phase serves all 32
// lanes for accesses of up to 4 bytes, a half-warp for 8 bytes, a quarter-warp for 16;
// it takes as many wavefronts as the most distinct 4-byte words any bank holds (lanes
// on the same word are served by a broadcast). Returns the wavefronts; `phases` gets
// the phases holding an active lane (the ideal).
inline unsigned long long wavefronts(const Request& r, unsigned long long* phases) {
  const unsigned words = r.size <= 4 ? 1 : std::min(r.size / 4, 32u);  // CUDA accesses are at most 16 bytes
  const unsigned lanes = 32 / words;  // a phase moves at most 32 words
  unsigned long long total = 0, used = 0;
  for (unsigned first = 0; first < 32; first += lanes) {
    uintptr_t touched[32];
    int n = 0;
    for (unsigned lane = first; lane < first + lanes; ++lane)
      if (r.mask >> lane & 1)
        for (unsigned k = 0; k < words; ++k) touched[n++] = (r.addr[lane] >> 2) + k;
    if (!n) continue;
    std::sort(touched, touched + n);
    n = int(std::unique(touched, touched + n) - touched);
    unsigned per_bank[32] = {}, most = 0;
    for (int i = 0; i < n; ++i) most = std::max(most, ++per_bank[touched[i] & 31]);
    total += most;
    ++used;
  }
  *phases = used;
  return total;
}

inline void count(int kind, Totals& t, const Request& r) {
  unsigned long long units, ideal, bytes;
  if (kind == LDG || kind == STG) {
    bytes = distinct_bytes(r, &units);
    ideal = (bytes + 31) / 32;
  } else {
    unsigned long long unused;
    bytes = distinct_bytes(r, &unused);
    units = wavefronts(r, &ideal);
  }
  ++t.requests;
  t.units += units;
  t.ideal += ideal;
  t.bytes += bytes;
}

inline void flush_warp(int warp) {
  WarpState& w = g_warps[size_t(warp)];
  LaunchTotals& launch = g_launches.back();
  for (int id : w.touched) {
    Pending& pd = w.sites[size_t(id)];
    Totals* t = nullptr;
    int region = -1;
    for (size_t i = 0; i < pd.used; ++i) {
      const Request& r = pd.reqs[i];
      if (r.region != region) t = &launch.sites[{id, region = r.region}];
      count(g_sites[size_t(id)]->kind, *t, r);
    }
    pd.used = 0;
    std::fill(pd.count, pd.count + 32, 0u);
    pd.listed = false;
  }
  w.touched.clear();
}

// A request the whole warp makes at once (a WMMA load or store, modelled in this
// header): counted right away, in the region of the calling lane.
inline void warp_request(Site* s, unsigned size, const uintptr_t (&addr)[32], unsigned mask) {
  number(s);
  Request r;
  r.region = g_region[emu::detail::cur().cur];
  r.size = size;
  r.mask = mask;
  std::copy(addr, addr + 32, r.addr);
  count(s->kind, g_launches.back().sites[{s->id, r.region}], r);
}

inline void launch_begin(dim3 grid, unsigned threads) {
  g_launches.emplace_back();
  g_launches.back().grid_blocks = 1ull * grid.x * grid.y * grid.z;
  g_warps.assign((threads + 31) / 32, WarpState{});
  g_region.assign(threads, 0);
}
inline void block_end() {
  for (size_t w = 0; w < g_warps.size(); ++w) flush_warp(int(w));
  std::fill(g_region.begin(), g_region.end(), 0);
  ++g_launches.back().blocks;
}
inline void barrier_done(int warps) {
  for (size_t w = 0; w < g_warps.size(); ++w) flush_warp(int(w));
  g_launches.back().ops[BARRIER] += unsigned(warps);
}
inline void warp_done(int warp) { flush_warp(warp); }
// Counted once per warp: by lane 0, which every warp has.
inline void warp_op(Op op) {
  if ((emu::detail::cur().cur & 31) == 0) ++g_launches.back().ops[op];
}

// Writes every launch's counters to `path` as tab-separated lines (see COUNTERS above);
// returns false when the file cannot be written.
inline bool write(const char* path) {
  FILE* f = std::fopen(path, "w");
  if (!f) return false;
  for (size_t i = 0; i < g_launches.size(); ++i) {
    const LaunchTotals& l = g_launches[i];
    std::fprintf(f, "launch\t%zu\t%llu\t%llu", i, l.blocks, l.grid_blocks);
    for (int op = 0; op < OPS; ++op) std::fprintf(f, "\t%s=%llu", op_names[op], l.ops[op]);
    std::fputc('\n', f);
    for (const auto& entry : l.sites) {
      const Site& s = *g_sites[size_t(entry.first.first)];
      const Totals& t = entry.second;
      const char* slash = std::strrchr(s.file, '/');
      std::fprintf(f, "site\t%zu\t%s\t%s\t%d\t%s\t%llu\t%llu\t%llu\t%llu\t%s\n", i, kind_names[s.kind],
                   slash ? slash + 1 : s.file, s.line, g_regions[size_t(entry.first.second)].c_str(), t.requests,
                   t.units, t.ideal, t.bytes, s.label);
    }
  }
  return std::fclose(f) == 0;
}
}  // namespace prof
}  // namespace emu

// The access `ref` (an lvalue) of kind emu::prof::LDG, STG, LDS or STS, recorded; the
// label is the access's source text.
#define EMU_PROFILE_SITE(kind, label) \
  ({ static ::emu::prof::Site emu_site_{kind, label, __FILE__, __LINE__, -1}; &emu_site_; })
#define EMU_ACCESS(kind, ...) (*::emu::prof::access(EMU_PROFILE_SITE(kind, #__VA_ARGS__), &(__VA_ARGS__)))
#define EMU_CAT2(a, b) a##b
#define EMU_CAT(a, b) EMU_CAT2(a, b)
#define EMU_REGION(name)                           \
  ::emu::prof::Region EMU_CAT(emu_region_, __LINE__)( \
      ({ static const int emu_region_id_ = ::emu::prof::region_id(name); emu_region_id_; }))
#endif  // EMU_PROFILE

// ---------------------------------------------------------------- built-in variables
inline const uint3& threadIdx = emu::detail::g_thread;
inline const uint3& blockIdx = emu::detail::g_block;
inline const dim3& blockDim = emu::detail::g_bdim;
inline const dim3& gridDim = emu::detail::g_gdim;
constexpr int warpSize = 32;

inline unsigned char* emu_dynamic_smem() { return emu::detail::cur().smem; }

// ---------------------------------------------------------------- synchronisation
inline void __syncthreads() { emu::detail::block_barrier(0); }
inline int __syncthreads_count(int p) { return emu::detail::block_barrier(p); }
inline int __syncthreads_and(int p) { return emu::detail::block_barrier(p) == emu::detail::g_launch->n; }
inline int __syncthreads_or(int p) { return emu::detail::block_barrier(p) != 0; }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
#ifdef EMU_PROFILE
  emu::prof::warp_op(emu::prof::WARP_SYNC);
#endif
  emu::detail::warp_barrier(mask, "__syncwarp");
}
inline void __threadfence() { emu::detail::compiler_fence(); }
inline void __threadfence_block() { emu::detail::compiler_fence(); }
inline void __threadfence_system() { emu::detail::compiler_fence(); }

template <class T> T __shfl_sync(unsigned m, T v, int src, int width = warpSize) {
  return emu::detail::shfl(m, v, 0, src, width, "__shfl_sync");
}
template <class T> T __shfl_up_sync(unsigned m, T v, unsigned d, int width = warpSize) {
  return emu::detail::shfl(m, v, 1, int(d), width, "__shfl_up_sync");
}
template <class T> T __shfl_down_sync(unsigned m, T v, unsigned d, int width = warpSize) {
  return emu::detail::shfl(m, v, 2, int(d), width, "__shfl_down_sync");
}
template <class T> T __shfl_xor_sync(unsigned m, T v, int lane_mask, int width = warpSize) {
  return emu::detail::shfl(m, v, 3, lane_mask, width, "__shfl_xor_sync");
}
inline unsigned __ballot_sync(unsigned m, int p) { return emu::detail::ballot(m, p, "__ballot_sync"); }
inline int __any_sync(unsigned m, int p) { return emu::detail::ballot(m, p, "__any_sync") != 0; }
inline int __all_sync(unsigned m, int p) {
  return emu::detail::ballot(m, p, "__all_sync") == emu::detail::my_warp().all_mask;
}
// Warps are assumed converged: every existing lane of the warp is reported active.
inline unsigned __activemask() { return emu::detail::my_warp().all_mask; }

// ---------------------------------------------------------------- atomics (plain RMW)
#define EMU_ATOMIC(NAME, T, EXPR) \
  inline T NAME(T* p, T v) { T old = *p; *p = (EXPR); return old; }
EMU_ATOMIC(atomicAdd, int, old + v) EMU_ATOMIC(atomicAdd, unsigned, old + v)
EMU_ATOMIC(atomicAdd, unsigned long long, old + v) EMU_ATOMIC(atomicAdd, float, old + v)
EMU_ATOMIC(atomicAdd, double, old + v)
EMU_ATOMIC(atomicSub, int, old - v) EMU_ATOMIC(atomicSub, unsigned, old - v)
EMU_ATOMIC(atomicMax, int, std::max(old, v)) EMU_ATOMIC(atomicMax, unsigned, std::max(old, v))
EMU_ATOMIC(atomicMax, long long, std::max(old, v))
EMU_ATOMIC(atomicMax, unsigned long long, std::max(old, v))
EMU_ATOMIC(atomicMin, int, std::min(old, v)) EMU_ATOMIC(atomicMin, unsigned, std::min(old, v))
EMU_ATOMIC(atomicMin, long long, std::min(old, v))
EMU_ATOMIC(atomicMin, unsigned long long, std::min(old, v))
EMU_ATOMIC(atomicExch, int, v) EMU_ATOMIC(atomicExch, unsigned, v)
EMU_ATOMIC(atomicExch, unsigned long long, v) EMU_ATOMIC(atomicExch, float, v)
EMU_ATOMIC(atomicAnd, int, old & v) EMU_ATOMIC(atomicAnd, unsigned, old & v)
EMU_ATOMIC(atomicOr, int, old | v) EMU_ATOMIC(atomicOr, unsigned, old | v)
EMU_ATOMIC(atomicXor, int, old ^ v) EMU_ATOMIC(atomicXor, unsigned, old ^ v)
#undef EMU_ATOMIC
#define EMU_CAS(T) \
  inline T atomicCAS(T* p, T cmp, T v) { T old = *p; if (old == cmp) *p = v; return old; }
EMU_CAS(int) EMU_CAS(unsigned) EMU_CAS(unsigned long long)
#undef EMU_CAS

// ---------------------------------------------------------------- math and bit casts
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
namespace emu { namespace detail {
template <class To, class From> To bit_cast(From f) {
  static_assert(sizeof(To) == sizeof(From), "size mismatch");
  To t;
  std::memcpy(&t, &f, sizeof t);
  return t;
}
}}  // namespace emu::detail
inline float __int_as_float(int x) { return emu::detail::bit_cast<float>(x); }
inline int __float_as_int(float x) { return emu::detail::bit_cast<int>(x); }
inline unsigned __float_as_uint(float x) { return emu::detail::bit_cast<unsigned>(x); }
inline float __uint_as_float(unsigned x) { return emu::detail::bit_cast<float>(x); }
inline double __longlong_as_double(long long x) { return emu::detail::bit_cast<double>(x); }
inline long long __double_as_longlong(double x) { return emu::detail::bit_cast<long long>(x); }
template <class T> T __ldg(const T* p) { return *p; }
// Round-to-nearest arithmetic that nvcc never contracts into an FMA: plain operations
// here (g++ contracts nothing on x86-64 without -mfma).
inline double __dadd_rn(double x, double y) { return x + y; }
inline double __dmul_rn(double x, double y) { return x * y; }
// Fast-math intrinsics: computed at full precision here.
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }  // NaN -> 0
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz(unsigned(x)) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }

// CUDA's global min/max: same-type overloads (fminf/fmaxf for floating point) plus the
// usual arithmetic conversions for mixed types (min(int, unsigned) compares unsigned).
#define EMU_MINMAX(T, MN, MX) \
  inline T min(T a, T b) { return MN; } \
  inline T max(T a, T b) { return MX; }
EMU_MINMAX(int, a < b ? a : b, a > b ? a : b)
EMU_MINMAX(unsigned, a < b ? a : b, a > b ? a : b)
EMU_MINMAX(long, a < b ? a : b, a > b ? a : b)
EMU_MINMAX(unsigned long, a < b ? a : b, a > b ? a : b)
EMU_MINMAX(long long, a < b ? a : b, a > b ? a : b)
EMU_MINMAX(unsigned long long, a < b ? a : b, a > b ? a : b)
EMU_MINMAX(float, fminf(a, b), fmaxf(a, b))
EMU_MINMAX(double, fmin(a, b), fmax(a, b))
#undef EMU_MINMAX
template <class A, class B, class C = std::common_type_t<A, B>,
          std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value &&
                           !std::is_same<A, B>::value, int> = 0>
C min(A a, B b) { return min(C(a), C(b)); }
template <class A, class B, class C = std::common_type_t<A, B>,
          std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value &&
                           !std::is_same<A, B>::value, int> = 0>
C max(A a, B b) { return max(C(a), C(b)); }

// ---------------------------------------------------------------- __half, __nv_bfloat16
namespace emu { namespace detail {
// Round a finite or infinite double to the binary format with `mb` mantissa and `eb`
// exponent bits, to nearest even (subnormals and overflow to infinity included).
inline uint32_t round_bits(double d, int mb, int eb) {
  uint64_t u = bit_cast<uint64_t>(d), a = u & 0x7fffffffffffffffull;
  uint32_t sign = uint32_t(u >> 63) << (mb + eb), inf = ((1u << eb) - 1) << mb;
  int bias = (1 << (eb - 1)) - 1, emin = 1 - bias, e = int(a >> 52) - 1023;
  if (e > bias) return sign | inf;
  uint64_t m = (a & 0xfffffffffffffull) | (a >> 52 ? 1ull << 52 : 0);
  int shift = 52 - mb + (e < emin ? emin - e : 0);
  if (shift > 63) return sign;
  uint32_t base = e < emin ? 0 : uint32_t(e - emin) << mb;  // implicit bit adds the last 1
  uint64_t q = m >> shift, r = m & ((1ull << shift) - 1), half = 1ull << (shift - 1);
  if (r > half || (r == half && (q & 1))) ++q;  // a carry may reach the exponent/infinity
  return sign | (base + uint32_t(q));
}
inline uint16_t f2h(float f) {
  uint32_t u = bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep the top payload bits, stay a NaN
    uint16_t r = uint16_t(0x7c00u | ((u & 0x7fffffu) >> 13));
    return uint16_t(((u >> 16) & 0x8000u) | (r == 0x7c00u ? 0x7c01u : r));
  }
  return uint16_t(round_bits(double(f), 10, 5));  // float -> double is exact
}
inline uint16_t d2h(double d) {
  uint64_t u = bit_cast<uint64_t>(d);
  if ((u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull) {
    uint16_t r = uint16_t(0x7c00u | ((u & 0xfffffffffffffull) >> 42));
    return uint16_t(((u >> 48) & 0x8000u) | (r == 0x7c00u ? 0x7c01u : r));
  }
  return uint16_t(round_bits(d, 10, 5));
}
inline float h2f(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact in float
    float v = float(m) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  uint32_t bits = e == 31 ? 0x7f800000u | (m << 13) : ((e + 112) << 23) | (m << 13);
  return bit_cast<float>(sign | bits);
}
inline uint16_t f2bf(float f) {
  uint32_t u = bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t(((u >> 16) & 0x8000u) | 0x7fc0u);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // exact RNE, overflow -> inf
}
inline uint16_t d2bf(double d) {
  if (std::isnan(d)) return std::signbit(d) ? 0xffc0 : 0x7fc0;
  return uint16_t(round_bits(d, 7, 8));
}
inline float bf2f(uint16_t h) { return bit_cast<float>(uint32_t(h) << 16); }
}}  // namespace emu::detail

// Both types mirror CUDA's overload set: implicit conversions from float/double/
// integers (round to nearest even) and to float, arithmetic computed in float and
// rounded once (correctly rounded for + - * /: float has at least 2p+2 bits), comparisons
// in float. As with CUDA, `h + 1.0f` is ambiguous: write h + __half(1.0f) or float(h) + 1.0f.
#define EMU_HALF_TYPE(T, RAW, F2X, D2X, X2F, INFB)                                             \
  struct RAW { unsigned short x; };                                                        \
  struct T {                                                                               \
    unsigned short __x;                                                                    \
    T() = default;                                                                         \
    constexpr T(RAW r) : __x(r.x) {}                                                       \
    T(float f) : __x(emu::detail::F2X(f)) {}                                               \
    T(double d) : __x(emu::detail::D2X(d)) {}                                              \
    template <class I, std::enable_if_t<std::is_integral<I>::value, int> = 0>             \
    T(I i) : __x(emu::detail::D2X(double(i))) {}                                           \
    operator float() const { return emu::detail::X2F(__x); }                               \
    operator RAW() const { return RAW{__x}; }                                              \
  };                                                                                       \
  inline T operator+(const T& a, const T& b) { return T(float(a) + float(b)); }            \
  inline T operator-(const T& a, const T& b) { return T(float(a) - float(b)); }            \
  inline T operator*(const T& a, const T& b) { return T(float(a) * float(b)); }            \
  inline T operator/(const T& a, const T& b) { return T(float(a) / float(b)); }            \
  inline T& operator+=(T& a, const T& b) { return a = a + b; }                             \
  inline T& operator-=(T& a, const T& b) { return a = a - b; }                             \
  inline T& operator*=(T& a, const T& b) { return a = a * b; }                             \
  inline T& operator/=(T& a, const T& b) { return a = a / b; }                             \
  inline T& operator++(T& a) { return a = a + T(1.0f); }                                   \
  inline T& operator--(T& a) { return a = a - T(1.0f); }                                   \
  inline T operator++(T& a, int) { T o = a; ++a; return o; }                               \
  inline T operator--(T& a, int) { T o = a; --a; return o; }                               \
  inline T operator+(const T& a) { return a; }                                             \
  inline T operator-(const T& a) { return T(RAW{(unsigned short)(a.__x ^ 0x8000u)}); }     \
  inline bool operator==(const T& a, const T& b) { return float(a) == float(b); }          \
  inline bool operator!=(const T& a, const T& b) { return float(a) != float(b); }          \
  inline bool operator<(const T& a, const T& b) { return float(a) < float(b); }            \
  inline bool operator<=(const T& a, const T& b) { return float(a) <= float(b); }          \
  inline bool operator>(const T& a, const T& b) { return float(a) > float(b); }            \
  inline bool operator>=(const T& a, const T& b) { return float(a) >= float(b); }          \
  inline bool __hisnan(T a) { return (a.__x & 0x7fffu) > INFB; }                            \
  inline bool __hisinf(T a) { return (a.__x & 0x7fffu) == INFB; }                           \
  inline T __habs(T a) { return T(RAW{(unsigned short)(a.__x & 0x7fffu)}); }               \
  inline T __hneg(T a) { return -a; }
EMU_HALF_TYPE(__half, __half_raw, f2h, d2h, h2f, 0x7c00u)
EMU_HALF_TYPE(__nv_bfloat16, __nv_bfloat16_raw, f2bf, d2bf, bf2f, 0x7f80u)
#undef EMU_HALF_TYPE
typedef __half half;
typedef __nv_bfloat16 nv_bfloat16;
static_assert(sizeof(__half) == 2 && std::is_trivially_copyable<__half>::value, "__half layout");
static_assert(sizeof(__nv_bfloat16) == 2 && std::is_trivially_copyable<__nv_bfloat16>::value,
              "__nv_bfloat16 layout");

inline __half __float2half_rn(float f) { return __half(f); }
inline __half __float2half(float f) { return __half(f); }
inline __half __double2half(double d) { return __half(d); }
inline float __half2float(__half h) { return float(h); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __double2bfloat16(double d) { return __nv_bfloat16(d); }
inline float __bfloat162float(__nv_bfloat16 h) { return float(h); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __ushort_as_half(unsigned short x) { return __half(__half_raw{x}); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) {
  return __nv_bfloat16(__nv_bfloat16_raw{x});
}

// ---------------------------------------------------------------- host API stubs
enum cudaError_t { cudaSuccess = 0 };
enum cudaMemcpyKind {
  cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice, cudaMemcpyDefault
};
inline cudaError_t cudaMalloc(void** p, size_t n) { *p = std::malloc(n ? n : 1); return cudaSuccess; }
template <class T> cudaError_t cudaMalloc(T** p, size_t n) { return cudaMalloc(reinterpret_cast<void**>(p), n); }
inline cudaError_t cudaFree(void* p) { std::free(p); return cudaSuccess; }
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) { std::memmove(d, s, n); return cudaSuccess; }
inline cudaError_t cudaMemset(void* d, int v, size_t n) { std::memset(d, v, n); return cudaSuccess; }
template <class T>
cudaError_t cudaMemcpyToSymbol(T& symbol, const void* s, size_t n, size_t offset = 0,
                               cudaMemcpyKind = cudaMemcpyHostToDevice) {
  std::memmove(reinterpret_cast<char*>(&symbol) + offset, s, n);
  return cudaSuccess;
}
template <class T>
cudaError_t cudaMemcpyFromSymbol(void* d, const T& symbol, size_t n, size_t offset = 0,
                                 cudaMemcpyKind = cudaMemcpyDeviceToHost) {
  std::memmove(d, reinterpret_cast<const char*>(&symbol) + offset, n);
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return "no error"; }

// ---------------------------------------------------------------- nvcuda::wmma
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

// Every lane holds the whole tile, row-major: x[r * cols + c] (see the top comment).
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert((M == 16 && N == 16 && K == 16) || (M == 32 && N == 8 && K == 16) ||
                    (M == 8 && N == 32 && K == 16),
                "emulated wmma shapes: m16n16k16, m32n8k16, m8n32k16");
  static constexpr bool is_acc = std::is_same<Use, accumulator>::value;
  static_assert(is_acc ? (std::is_same<T, float>::value || std::is_same<T, __half>::value)
                       : (std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value),
                "emulated wmma types: __half/__nv_bfloat16 inputs, float/__half accumulators");
  static constexpr int rows = std::is_same<Use, matrix_b>::value ? K : M;
  static constexpr int cols = std::is_same<Use, matrix_a>::value ? K : N;
  enum { num_elements = rows * cols };
  typedef T element_type;
  typedef Use use_type;
  T x[num_elements];
};

template <class U, int M, int N, int K, class T, class L>
inline void fill_fragment(fragment<U, M, N, K, T, L>& f, const std::common_type_t<T>& v) {
  for (auto& e : f.x) e = v;
}

namespace detail {
#ifdef EMU_PROFILE
// The shared-memory requests of WMMA loads and stores, as we assume the hardware makes
// them (the templates use WMMA on shared memory only, so they count as LDS/STS):
// * matrix_a/matrix_b (16-bit elements) load like ldmatrix.x4: the tile is cut into 8x8
//   blocks of 8 lines (rows for row_major, columns for col_major) by 16 contiguous
//   bytes; a request reads 4 blocks, one per quarter-warp phase, each lane one
//   16-byte line segment.
// * accumulators follow the mma.sync C layout per 8x8 block: lane 4g + t holds row g,
//   columns 2t and 2t + 1, one request of 2-element accesses per block (row-major
//   memory), or two of single elements (column-major).
enum WmmaSite { LOAD_A, LOAD_B, LOAD_C, STORE_C };
inline emu::prof::Site* wmma_site(WmmaSite which) {
  static emu::prof::Site sites[] = {
      {emu::prof::LDS, "wmma::load_matrix_sync(matrix_a)", __FILE__, __LINE__, -1},
      {emu::prof::LDS, "wmma::load_matrix_sync(matrix_b)", __FILE__, __LINE__, -1},
      {emu::prof::LDS, "wmma::load_matrix_sync(accumulator)", __FILE__, __LINE__, -1},
      {emu::prof::STS, "wmma::store_matrix_sync(accumulator)", __FILE__, __LINE__, -1}};
  return &sites[which];
}
template <class T>
void profile_operand(emu::prof::Site* site, const T* p, unsigned ldm, int rows, int cols, bool row_major) {
  const int lines = row_major ? rows : cols, length = row_major ? cols : rows;
  uintptr_t addr[32] = {};
  unsigned mask = 0;
  int phase = 0;
  for (int line = 0; line < lines; line += 8)
    for (int at = 0; at < length; at += 8) {
      for (int i = 0; i < 8; ++i) addr[8 * phase + i] = reinterpret_cast<uintptr_t>(p + size_t(line + i) * ldm + at);
      mask |= 0xffu << (8 * phase);
      if (++phase == 4) {
        emu::prof::warp_request(site, 16, addr, mask);
        phase = 0;
        mask = 0;
      }
    }
  if (phase) emu::prof::warp_request(site, 16, addr, mask);
}
template <class T>
void profile_accumulator(emu::prof::Site* site, const T* p, unsigned ldm, int rows, int cols, bool row_major) {
  uintptr_t addr[32];
  for (int rb = 0; rb < rows; rb += 8)
    for (int cb = 0; cb < cols; cb += 8)
      for (int e = 0; e < (row_major ? 1 : 2); ++e) {
        for (int lane = 0; lane < 32; ++lane) {
          const size_t r = size_t(rb + lane / 4), c = size_t(cb + 2 * (lane % 4) + e);
          addr[lane] = reinterpret_cast<uintptr_t>(p + (row_major ? r * ldm + c : r + c * ldm));
        }
        emu::prof::warp_request(site, unsigned(sizeof(T)) * (row_major ? 2 : 1), addr, ~0u);
      }
}
#endif

template <class F, class P>
void load(F& f, const P* p, unsigned ldm, bool row_major) {
  emu::detail::warp_barrier(~0u, "wmma::load_matrix_sync");  // others' stores are done
#ifdef EMU_PROFILE
  if (emu::detail::my_lane() == 0) {
    if (F::is_acc)
      profile_accumulator(wmma_site(LOAD_C), p, ldm, F::rows, F::cols, row_major);
    else
      profile_operand(wmma_site(std::is_same<typename F::use_type, matrix_a>::value ? LOAD_A : LOAD_B), p, ldm,
                      F::rows, F::cols, row_major);
  }
#endif
  for (int r = 0; r < F::rows; ++r)
    for (int c = 0; c < F::cols; ++c)
      f.x[r * F::cols + c] = row_major ? p[size_t(r) * ldm + c] : p[r + size_t(c) * ldm];
  emu::detail::warp_barrier(~0u, "wmma::load_matrix_sync");  // every lane has read
}
}  // namespace detail

template <class U, int M, int N, int K, class T, class L>
inline void load_matrix_sync(fragment<U, M, N, K, T, L>& f, const T* p, unsigned ldm) {
  static_assert(!std::is_same<U, accumulator>::value, "accumulator loads take a layout_t");
  static_assert(std::is_same<L, row_major>::value || std::is_same<L, col_major>::value,
                "matrix_a/matrix_b fragments need a row_major or col_major layout");
  detail::load(f, p, ldm, std::is_same<L, row_major>::value);
}
template <int M, int N, int K, class T>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const T* p, unsigned ldm,
                             layout_t layout) {
  detail::load(f, p, ldm, layout == mem_row_major);
}
template <int M, int N, int K, class T>
inline void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm,
                              layout_t layout) {
  emu::detail::warp_barrier(~0u, "wmma::store_matrix_sync");
#ifdef EMU_PROFILE
  if (emu::detail::my_lane() == 0)
    detail::profile_accumulator(detail::wmma_site(detail::STORE_C), p, ldm, M, N, layout == mem_row_major);
#endif
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      (layout == mem_row_major ? p[size_t(r) * ldm + c] : p[r + size_t(c) * ldm]) = f.x[r * N + c];
  emu::detail::warp_barrier(~0u, "wmma::store_matrix_sync");
}
// d = a * b + c: products and sums in float, k ascending, starting from c. d may be c.
template <int M, int N, int K, class TA, class LA, class LB, class TC, class TD>
inline void mma_sync(fragment<accumulator, M, N, K, TD>& d,
                     const fragment<matrix_a, M, N, K, TA, LA>& a,
                     const fragment<matrix_b, M, N, K, TA, LB>& b,
                     const fragment<accumulator, M, N, K, TC>& c) {
#ifdef EMU_PROFILE
  emu::prof::warp_op(emu::prof::MMA);
#endif
  float fa[M * K], fb[K * N];
  for (int i = 0; i < M * K; ++i) fa[i] = float(a.x[i]);
  for (int i = 0; i < K * N; ++i) fb[i] = float(b.x[i]);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float acc = float(c.x[i * N + j]);
      for (int k = 0; k < K; ++k) acc += fa[i * K + k] * fb[k * N + j];
      d.x[i * N + j] = TD(acc);
    }
}
}  // namespace wmma
}  // namespace nvcuda

#undef EMU_WHERE
#undef EMU_WHERE_ARGS
#endif  // PARTITION_CUDA_EMULATOR_H
