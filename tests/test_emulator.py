"""Tests of the CPU CUDA emulator (backends/cuda/emulator/cuda_emulator.h).

Each test program is plain CUDA source (a .cu text with a ``main()``) compiled with
``g++ -std=c++17 -O1 -DPARTITION_EMULATOR``. The three programs are compiled once per
module, in parallel; each test runs one of them with a sub-test name and checks its
output in Python (against numpy / ml_dtypes where it computes numbers).
"""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
EMULATOR_DIR = ROOT / "backends" / "cuda" / "emulator"
GXX = shutil.which("g++")

pytestmark = pytest.mark.skipif(
    GXX is None, reason="g++ is not on PATH: the CUDA emulator tests compile C++ programs"
)

CXXFLAGS = ["-std=c++17", "-O1", "-Wall", "-Wextra", "-DPARTITION_EMULATOR", "-I", str(EMULATOR_DIR)]

# --------------------------------------------------------------------------- programs

SYNC_CU = r"""
#include "cuda_emulator.h"
#include <chrono>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <vector>
using namespace std;  // CUDA's global min/max must not clash with std::min/std::max

template <class T> static void show(const char* name, const std::vector<T>& v) {
  std::printf("%s:", name);
  for (const T& x : v) {
    if (std::is_floating_point<T>::value) std::printf(" %.17g", double(x));
    else if (std::is_signed<T>::value) std::printf(" %lld", (long long)x);
    else std::printf(" %llu", (unsigned long long)x);
  }
  std::printf("\n");
}
template <class T> static void show1(const char* name, T x) { show(name, std::vector<T>{x}); }

// ---- block reduction: shared-memory tree with __syncthreads
__global__ void block_sum(const float* in, float* out, int n) {
  __shared__ float s[256];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (t < o) s[t] += s[t + o];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// ---- warp shuffles: every lane's result is written out
template <class T> __device__ T xor_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__global__ void shuffles(const int* in, int* xs, int* ds, int* up8, int* idx, int* idx16,
                         int* xor8, float* fx, double* dx, long long* llx, unsigned* ux,
                         unsigned long long* ullx) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  int v = in[t];
  xs[t] = xor_sum(v);
  int d = v;
  for (int o = 16; o > 0; o >>= 1) d += __shfl_down_sync(0xffffffffu, d, o);
  ds[t] = d;
  int s = v;  // inclusive scan inside segments of 8 lanes
  for (int o = 1; o < 8; o <<= 1) {
    int y = __shfl_up_sync(0xffffffffu, s, o, 8);
    if (int(threadIdx.x & 7) >= o) s += y;
  }
  up8[t] = s;
  idx[t] = __shfl_sync(0xffffffffu, v, 3);
  idx16[t] = __shfl_sync(0xffffffffu, v, threadIdx.x + 5, 16);
  xor8[t] = __shfl_xor_sync(0xffffffffu, v, 12, 8);
  fx[t] = xor_sum(float(v) * 0.5f);
  dx[t] = xor_sum(double(v) * 0.25);
  llx[t] = xor_sum((long long)v * 3000000000LL);
  ux[t] = xor_sum(unsigned(v) * 7u);
  ullx[t] = xor_sum((unsigned long long)v << 33);
}

// ---- votes
__global__ void votes(unsigned* ballot, int* any5, int* all_small, int* all_not40,
                      unsigned* active) {
  int t = threadIdx.x;
  ballot[t] = __ballot_sync(0xffffffffu, t % 3 == 0);
  any5[t] = __any_sync(0xffffffffu, t == 5);
  all_small[t] = __all_sync(0xffffffffu, t < 1000);
  all_not40[t] = __all_sync(0xffffffffu, t != 40);
  active[t] = __activemask();
}

// ---- atomics: every thread of a 4 x 256 grid hits the same counters
struct Counters {
  int i; unsigned u; unsigned long long ull; float f; double d;
  int imax, imin; unsigned umax, umin; long long llmax, llmin; unsigned long long ullmax, ullmin;
  int exch_slot; float fexch_slot; unsigned long long cas_sum; int cas_i; unsigned cas_u;
};
__global__ void atomics(Counters* c, int* add_old, int* exch_old) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  add_old[t] = atomicAdd(&c->i, 1);
  atomicAdd(&c->u, 2u);
  atomicAdd(&c->ull, 3ull);
  atomicAdd(&c->f, 0.5f);
  atomicAdd(&c->d, 0.25);
  int k = (t * 7919) % 1000 - 500;
  atomicMax(&c->imax, k);
  atomicMin(&c->imin, k);
  atomicMax(&c->umax, unsigned(t) * 2654435761u);
  atomicMin(&c->umin, unsigned(t) * 2654435761u + 1u);
  long long w = (t % 2 ? 1LL : -1LL) * t * 1000000007LL;
  atomicMax(&c->llmax, w);
  atomicMin(&c->llmin, w);
  atomicMax(&c->ullmax, (unsigned long long)t << 40);
  atomicMin(&c->ullmin, ((unsigned long long)t << 40) + 5);
  exch_old[t] = atomicExch(&c->exch_slot, t);
  atomicExch(&c->fexch_slot, float(t));
  unsigned long long old = c->cas_sum;
  int oi = c->cas_i;
  unsigned ou = c->cas_u;
  __syncthreads();  // every thread of the block saw the same values: most CASes retry
  unsigned long long assumed;
  do { assumed = old; old = atomicCAS(&c->cas_sum, assumed, assumed + t); } while (old != assumed);
  int ai;
  do { ai = oi; oi = atomicCAS(&c->cas_i, ai, ai + 1); } while (oi != ai);
  unsigned au;
  do { au = ou; ou = atomicCAS(&c->cas_u, au, au + 3u); } while (ou != au);
}

// ---- grid-stride loop, and 3-D grid/block indexing
__global__ void axpb(const float* x, float* y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    y[i] = 2.0f * x[i] + 1.0f;
}
__global__ void index3d(int* out) {
  int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  int nt = blockDim.x * blockDim.y * blockDim.z;
  out[b * nt + t] = blockIdx.x | blockIdx.y << 4 | blockIdx.z << 8 | threadIdx.x << 12 |
                    threadIdx.y << 16 | threadIdx.z << 20;
}

// ---- dynamic shared memory: reverse each block's chunk; check alignment and poisoning
__global__ void reverse_chunks(const float* in, float* out, int* flags, int smem_bytes) {
  unsigned char* raw = emu_dynamic_smem();
  int t = threadIdx.x, base = blockIdx.x * blockDim.x;
  if (t == 0)
    flags[blockIdx.x] = (reinterpret_cast<uintptr_t>(raw) % 16 == 0) +
                        2 * (raw[smem_bytes - 1] == 0xFF);  // every block starts poisoned
  __syncthreads();
  float* s = reinterpret_cast<float*>(raw);
  s[t] = in[base + t];
  raw[smem_bytes - 1] = 0;
  __syncthreads();
  out[base + t] = s[blockDim.x - 1 - t];
}

// ---- barrier reuse: a ring rotation through two buffers, one barrier per step
__global__ void rotate_ring(int* out, int iters, int* counts) {
  __shared__ int buf[2][160];
  int t = threadIdx.x, n = blockDim.x;
  buf[0][t] = t;
  __syncthreads();
  for (int it = 0; it < iters; ++it) {
    buf[(it + 1) & 1][t] = buf[it & 1][(t + 1) % n];
    __syncthreads();
  }
  out[t] = buf[iters & 1][t];
  int c = __syncthreads_count(t % 3 == 0);
  int a = __syncthreads_and(t >= 0);
  int a2 = __syncthreads_and(t != 7);
  int o = __syncthreads_or(t == 159);
  int o2 = __syncthreads_or(0);
  if (t == 0) counts[0] = c, counts[1] = a, counts[2] = a2, counts[3] = o, counts[4] = o2;
}

// ---- partial last warp: 48 threads = a full warp and a 16-lane warp
__global__ void partial(int* seg16, unsigned* ballot, unsigned* active, int* anyall, int* from20,
                        int* down8, int* block_total) {
  __shared__ int total;
  int t = threadIdx.x, g = blockIdx.x * blockDim.x + t;
  int v = t + 1 + 100 * blockIdx.x;
  if (t == 0) total = 0;
  __syncthreads();
  atomicAdd(&total, v);
  int s = v;
  for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o, 16);
  seg16[g] = s;
  ballot[g] = __ballot_sync(0xffffffffu, t % 2 == 0);
  active[g] = __activemask();
  anyall[g] = __any_sync(0xffffffffu, t == 40) | __all_sync(0xffffffffu, t < 48) << 1;
  __syncwarp();
  from20[g] = __shfl_sync(0xffffffffu, v, 20);
  down8[g] = __shfl_down_sync(0xffffffffu, v, 8);
  __syncthreads();
  if (t == 0) block_total[blockIdx.x] = total;
}

// ---- 1024 threads per block (1-D and 3-D)
__global__ void big_block(const int* in, int* sums, int* warp_sums, unsigned* x0_ballot, int* lin) {
  __shared__ int s[1024];
  int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  int n = blockDim.x * blockDim.y * blockDim.z;
  s[t] = in[t];
  __syncthreads();
  for (int o = n / 2; o > 0; o >>= 1) {
    if (t < o) s[t] += s[t + o];
    __syncthreads();
  }
  if (t == 0) sums[blockIdx.x] = s[0];
  warp_sums[t] = xor_sum(in[t]);
  x0_ballot[t] = __ballot_sync(0xffffffffu, threadIdx.x == 0);
  lin[t] = t;
}

// ---- qualifiers, alignment, CUDA's min/max, intrinsics, vector types
static_assert(alignof(float2) == 8 && alignof(float4) == 16 && alignof(int2) == 8 &&
              alignof(int4) == 16 && alignof(uint2) == 8 && alignof(uint4) == 16 &&
              alignof(double2) == 16 && sizeof(float4) == 16, "CUDA vector alignment");
struct __align__(16) Aligned { float a; };
static_assert(alignof(Aligned) == 16, "__align__ on a struct");
__global__ void __launch_bounds__(128, 2) misc(float* __restrict__ f, long long* i) {
  __shared__ __align__(16) float a16[3];
  __align__(16) __shared__ unsigned char b16[5];
  a16[threadIdx.x % 3] = 0.0f;
  b16[threadIdx.x % 5] = 0;
  __syncthreads();
  if (threadIdx.x != 0) return;
  i[0] = reinterpret_cast<uintptr_t>(a16) % 16 == 0 && reinterpret_cast<uintptr_t>(b16) % 16 == 0;
  i[1] = min(-1, 2u);  // compared as unsigned, as in CUDA
  i[2] = max(-1, 2u);
  i[3] = min(5LL, 3);
  i[4] = min(7, 9) + max(7u, 9u) + max(-3LL, -4LL);
  i[5] = __float_as_int(1.0f);
  i[6] = __float_as_uint(-2.0f);
  i[7] = __double_as_longlong(1.5);
  i[8] = __popc(0xF0F0u) + 100 * __clz(1) + 10000 * __ffs(8);
  int2 q = make_int2(3, 4);
  dim3 d(5);
  i[9] = q.x * q.y + 1000 * (d.x * 100 + d.y * 10 + d.z);
  f[0] = max(1.0f, 2.5);
  f[1] = min(NAN, 1.0f);
  f[2] = rsqrtf(16.0f);
  f[3] = float(rsqrt(0.25));
  f[4] = __int_as_float(0x40490fdb);
  f[5] = __uint_as_float(0xbf800000u);
  f[6] = float(__longlong_as_double(0x3ff8000000000000LL));
  f[7] = __ldg(f + 2);
  f[8] = __saturatef(1.5f) + __saturatef(-1.0f);
  float4 v = make_float4(1, 2, 3, 4);
  f[9] = v.w + std::min(v.x, v.y);
  __half h = __float2half(0.1f);
  f[10] = float(h * h + __half(1));
}

// ---- failures that must stop the program with a message
__global__ void early_return() {
  if (threadIdx.x == 0) return;
  __syncthreads();
}
__global__ void return_while_waiting() {
  if (threadIdx.x == 40) return;
  __syncthreads();
}
__global__ void mixed_barriers(int* out) {
  int v = threadIdx.x;
  if ((threadIdx.x & 31) < 16) v = __shfl_sync(0xffffffffu, v, 0);
  else __syncthreads();
  out[threadIdx.x] = v;
}
__global__ void partial_mask() { __syncwarp(0x0000ffffu); }
__device__ int deep(int n) {
  volatile char pad[1024];  // read after the call: the frame stays live
  pad[0] = char(n);
  int r = n ? deep(n - 1) : 0;
  return r + pad[0];
}
__global__ void recurse(int* out) { out[threadIdx.x] = deep(100000); }

// ---- timing of fiber switches (not a check)
__global__ void barriers(int iters) {
  for (int i = 0; i < iters; ++i) __syncthreads();
}

int main(int argc, char** argv) {
  std::string what = argc > 1 ? argv[1] : "";
  if (what == "block_reduce") {
    int n = 1000;
    std::vector<float> in(n), out(4);
    for (int i = 0; i < n; ++i) in[i] = float(i % 17) - 5.0f;
    emu::launch(block_sum, 4, 256, 0, in.data(), out.data(), n);
    show("sums", out);
  } else if (what == "shuffles") {
    int n = 64;
    std::vector<int> in(n), xs(n), ds(n), up8(n), idx(n), idx16(n), xor8(n);
    std::vector<float> fx(n);
    std::vector<double> dx(n);
    std::vector<long long> llx(n);
    std::vector<unsigned> ux(n);
    std::vector<unsigned long long> ullx(n);
    for (int i = 0; i < n; ++i) in[i] = (i * 37) % 101 - 50;
    emu::launch(shuffles, 2, 32, 0, in.data(), xs.data(), ds.data(), up8.data(), idx.data(),
                idx16.data(), xor8.data(), fx.data(), dx.data(), llx.data(), ux.data(), ullx.data());
    show("in", in); show("xor", xs); show("down", ds); show("up8", up8); show("idx", idx);
    show("idx16", idx16); show("xor8", xor8); show("fx", fx); show("dx", dx); show("llx", llx);
    show("ux", ux); show("ullx", ullx);
  } else if (what == "votes") {
    int n = 64;
    std::vector<unsigned> ballot(n), active(n);
    std::vector<int> any5(n), all_small(n), all_not40(n);
    emu::launch(votes, 1, n, 0, ballot.data(), any5.data(), all_small.data(), all_not40.data(),
                active.data());
    show("ballot", ballot); show("any5", any5); show("all_small", all_small);
    show("all_not40", all_not40); show("active", active);
  } else if (what == "atomics") {
    int n = 4 * 256;
    Counters c{};
    c.imax = -1000000; c.imin = 1000000; c.umax = 0; c.umin = ~0u;
    c.llmax = -(1LL << 62); c.llmin = 1LL << 62; c.ullmax = 0; c.ullmin = ~0ull;
    c.exch_slot = -1; c.fexch_slot = -1.0f;
    std::vector<int> add_old(n), exch_old(n);
    emu::launch(atomics, 4, 256, 0, &c, add_old.data(), exch_old.data());
    show1("i", c.i); show1("u", c.u); show1("ull", c.ull); show1("f", c.f); show1("d", c.d);
    show1("imax", c.imax); show1("imin", c.imin); show1("umax", c.umax); show1("umin", c.umin);
    show1("llmax", c.llmax); show1("llmin", c.llmin); show1("ullmax", c.ullmax);
    show1("ullmin", c.ullmin); show1("exch_slot", c.exch_slot); show1("fexch_slot", c.fexch_slot);
    show1("cas_sum", c.cas_sum); show1("cas_i", c.cas_i); show1("cas_u", c.cas_u);
    show("add_old", add_old); show("exch_old", exch_old);
  } else if (what == "grid_stride") {
    int n = 100003;
    std::vector<float> x(n), y(n, -7.0f);
    for (int i = 0; i < n; ++i) x[i] = float(i % 1000);
    emu::launch(axpb, 7, 96, 0, x.data(), y.data(), n);
    int bad = 0;
    for (int i = 0; i < n; ++i) bad += y[i] != 2.0f * x[i] + 1.0f;
    show1("bad", bad);
    std::vector<int> ids(3 * 2 * 2 * 4 * 3 * 2, -1);
    emu::launch(index3d, dim3(3, 2, 2), dim3(4, 3, 2), 0, ids.data());
    show("ids", ids);
  } else if (what == "dynamic_smem") {
    for (int block : {200, 64}) {
      int blocks = 3, n = block * blocks, bytes = block * 4 + 13;
      std::vector<float> in(n), out(n);
      std::vector<int> flags(blocks);
      for (int i = 0; i < n; ++i) in[i] = float(i);
      emu::launch(reverse_chunks, blocks, block, bytes, in.data(), out.data(), flags.data(), bytes);
      show("out", out);
      show("flags", flags);
    }
  } else if (what == "barrier_loop") {
    int iters = 1001;
    std::vector<int> out(160), counts(5);
    emu::launch(rotate_ring, 2, 160, 0, out.data(), iters, counts.data());
    show("out", out);
    show("counts", counts);
  } else if (what == "partial_warp") {
    int n = 2 * 48;
    std::vector<int> seg16(n), anyall(n), from20(n), down8(n), totals(2);
    std::vector<unsigned> ballot(n), active(n);
    emu::launch(partial, 2, 48, 0, seg16.data(), ballot.data(), active.data(), anyall.data(),
                from20.data(), down8.data(), totals.data());
    show("seg16", seg16); show("ballot", ballot); show("active", active); show("anyall", anyall);
    show("from20", from20); show("down8", down8); show("totals", totals);
  } else if (what == "block1024") {
    std::vector<int> in(1024), sums(2), warp_sums(1024), lin(1024);
    std::vector<unsigned> ballot(1024);
    for (int i = 0; i < 1024; ++i) in[i] = (i * 13) % 31;
    emu::launch(big_block, 2, 1024, 0, in.data(), sums.data(), warp_sums.data(), ballot.data(),
                lin.data());
    show("sums", sums); show("warp_sums", warp_sums); show("ballot1d", ballot);
    emu::launch(big_block, 1, dim3(8, 16, 8), 0, in.data(), sums.data(), warp_sums.data(),
                ballot.data(), lin.data());
    show("sum3d", std::vector<int>{sums[0]}); show("ballot3d", ballot); show("lin3d", lin);
  } else if (what == "misc") {
    std::vector<float> f(11);
    std::vector<long long> i(10);
    emu::launch(misc, 1, 128, 0, f.data(), i.data());
    show("f", f);
    show("i", i);
  } else if (what == "early_return") {
    emu::launch(early_return, 1, 64, 0);
  } else if (what == "return_while_waiting") {
    emu::launch(return_while_waiting, 1, 64, 0);
  } else if (what == "mixed_barriers") {
    std::vector<int> out(64);
    emu::launch(mixed_barriers, 1, 64, 0, out.data());
  } else if (what == "partial_mask") {
    emu::launch(partial_mask, 1, 32, 0);
  } else if (what == "stack_overflow") {
    std::vector<int> out(32);
    emu::launch(recurse, 1, 32, 0, out.data());
  } else if (what == "bench") {
    int threads = 256, iters = 2000;
    auto t0 = std::chrono::steady_clock::now();
    emu::launch(barriers, 1, threads, 0, iters);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // every barrier resumes each fiber once: two swapcontext calls per thread
    std::printf("ns_per_switch: %.1f\n", s * 1e9 / (2.0 * threads * iters));
  } else {
    std::fprintf(stderr, "unknown sub-test '%s'\n", what.c_str());
    return 2;
  }
  std::printf("done\n");
  return 0;
}
"""

CONVERT_CU = r"""
#include "cuda_emulator.h"
#include <cstdio>
#include <string>
#include <vector>

template <class T> static std::vector<T> load(const char* path) {
  std::FILE* f = std::fopen(path, "rb");
  if (!f) { std::perror(path); std::exit(2); }
  std::fseek(f, 0, SEEK_END);
  long bytes = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  std::vector<T> v(bytes / sizeof(T));
  if (std::fread(v.data(), sizeof(T), v.size(), f) != v.size()) std::exit(3);
  std::fclose(f);
  return v;
}
template <class T> static void save(const std::string& path, const std::vector<T>& v) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(v.data(), sizeof(T), v.size(), f) != v.size()) std::exit(4);
  std::fclose(f);
}

__global__ void from_float(const float* in, unsigned short* h, unsigned short* b, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    h[i] = __half_as_ushort(__float2half_rn(in[i]));
    b[i] = __bfloat16_as_ushort(__float2bfloat16_rn(in[i]));
  }
}
__global__ void from_double(const double* in, unsigned short* h, unsigned short* b, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    h[i] = __half_as_ushort(__double2half(in[i]));
    b[i] = __bfloat16_as_ushort(__double2bfloat16(in[i]));
  }
}
// All 65536 patterns of each type: to float, __hisnan, __habs, and arithmetic with a
// second operand taken from a pair list.
__global__ void to_float(float* hf, float* bf, unsigned char* flags, unsigned short* habs,
                         unsigned short* babs) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  __half h = __ushort_as_half((unsigned short)i);
  __nv_bfloat16 b = __ushort_as_bfloat16((unsigned short)i);
  hf[i] = __half2float(h);
  bf[i] = __bfloat162float(b);
  flags[i] = __hisnan(h) | __hisnan(b) << 1 | __hisinf(h) << 2 | __hisinf(b) << 3;
  habs[i] = __half_as_ushort(__habs(h));
  babs[i] = __bfloat16_as_ushort(__habs(b));
}
__global__ void arith(const unsigned short* pairs, unsigned short* out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    __half a = __ushort_as_half(pairs[2 * i]), b = __ushort_as_half(pairs[2 * i + 1]);
    out[4 * i + 0] = __half_as_ushort(a + b);
    out[4 * i + 1] = __half_as_ushort(a - b);
    out[4 * i + 2] = __half_as_ushort(a * b);
    out[4 * i + 3] = __half_as_ushort(a / b);
  }
}

int main(int argc, char** argv) {
  if (argc != 5) return 2;
  std::string dir = argv[4];
  auto f = load<float>(argv[1]);
  auto d = load<double>(argv[2]);
  auto p = load<unsigned short>(argv[3]);
  std::vector<unsigned short> fh(f.size()), fb(f.size()), dh(d.size()), db(d.size());
  emu::launch(from_float, 64, 256, 0, f.data(), fh.data(), fb.data(), int(f.size()));
  emu::launch(from_double, 64, 256, 0, d.data(), dh.data(), db.data(), int(d.size()));
  std::vector<float> hf(65536), bf(65536);
  std::vector<unsigned char> flags(65536);
  std::vector<unsigned short> habs(65536), babs(65536), ar(p.size() * 2);
  emu::launch(to_float, 256, 256, 0, hf.data(), bf.data(), flags.data(), habs.data(), babs.data());
  emu::launch(arith, 64, 256, 0, p.data(), ar.data(), int(p.size() / 2));
  save(dir + "/fh", fh); save(dir + "/fb", fb); save(dir + "/dh", dh); save(dir + "/db", db);
  save(dir + "/hf", hf); save(dir + "/bf", bf); save(dir + "/flags", flags);
  save(dir + "/habs", habs); save(dir + "/babs", babs); save(dir + "/arith", ar);
  std::printf("done\n");
  return 0;
}
"""

WMMA_CU = r"""
#include "cuda_emulator.h"
#include <cstdio>
#include <string>
#include <vector>
using namespace nvcuda;

// D = scale * (A @ B + C); A is M x K row-major, B is K x N stored row-major or
// column-major, C is M x N stored row- or column-major, D row-major. One warp per 16 x 16
// output tile (4 warps per block); each K step the whole block stages the A and B tiles
// through shared memory (plain stores by all 128 threads, then load_matrix_sync).
template <class T, class LB, bool C_COL>
__global__ void gemm(const T* A, const T* B, const float* C, float* D, int M, int N, int K,
                     float scale) {
  __shared__ T sa[4][16 * 16];
  __shared__ T sb[4][16 * 16];
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int tm = (blockIdx.x * 4 + warp) / (N / 16), tn = (blockIdx.x * 4 + warp) % (N / 16);
  constexpr bool b_row = std::is_same<LB, wmma::row_major>::value;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  if (C_COL)
    wmma::load_matrix_sync(c, C + tn * 16 * M + tm * 16, M, wmma::mem_col_major);
  else
    wmma::load_matrix_sync(c, C + tm * 16 * N + tn * 16, N, wmma::mem_row_major);
  for (int k0 = 0; k0 < K; k0 += 16) {
    for (int e = lane; e < 256; e += 32) {  // each lane copies 8 elements of each tile
      int r = e / 16, q = e % 16;
      sa[warp][e] = A[(tm * 16 + r) * K + k0 + q];
      // sb keeps B's storage order: row-major (k, n) or column-major (n, k)
      sb[warp][e] = b_row ? B[(k0 + r) * N + tn * 16 + q] : B[(tn * 16 + r) * K + k0 + q];
    }
    wmma::load_matrix_sync(a, sa[warp], 16);
    wmma::load_matrix_sync(b, sb[warp], 16);
    wmma::mma_sync(c, a, b, c);
    __syncwarp();  // the next step overwrites the staged tiles
  }
  for (int i = 0; i < c.num_elements; ++i) c.x[i] *= scale;  // uniform elementwise op
  wmma::store_matrix_sync(D + tm * 16 * N + tn * 16, c, N, wmma::mem_row_major);
}

template <class T, class LB, bool C_COL>
static void run(const std::vector<float>& a, const std::vector<float>& b,
                const std::vector<float>& c, int M, int N, int K, float scale) {
  std::vector<T> ta(a.begin(), a.end()), tb(b.begin(), b.end());
  std::vector<float> d(M * N, -1.0f);
  int tiles = (M / 16) * (N / 16);
  emu::launch(gemm<T, LB, C_COL>, tiles / 4, 128, 0, ta.data(), tb.data(), c.data(), d.data(),
              M, N, K, scale);
  std::printf("D:");
  for (float x : d) std::printf(" %.9g", x);
  std::printf("\n");
}

int main(int argc, char** argv) {
  int M, N, K;
  float scale;
  if (argc != 2 || std::scanf("%d %d %d %f", &M, &N, &K, &scale) != 4) return 2;
  std::vector<float> a(M * K), b(K * N), c(M * N);
  for (float& x : a) if (std::scanf("%f", &x) != 1) return 2;
  for (float& x : b) if (std::scanf("%f", &x) != 1) return 2;
  for (float& x : c) if (std::scanf("%f", &x) != 1) return 2;
  // Storage orders: f16 -> B column-major, C column-major; bf16 -> B and C row-major.
  if (std::string(argv[1]) == "f16") run<__half, wmma::col_major, true>(a, b, c, M, N, K, scale);
  else run<__nv_bfloat16, wmma::row_major, false>(a, b, c, M, N, K, scale);
  static_assert(wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major>::num_elements == 256, "");
  static_assert(wmma::fragment<wmma::accumulator, 16, 16, 16, float>::num_elements == 256, "");
  static_assert(sizeof(__half) == 2 && sizeof(nv_bfloat16) == 2, "");
  std::printf("done\n");
  return 0;
}
"""

PROGRAMS = {"sync": SYNC_CU, "convert": CONVERT_CU, "wmma": WMMA_CU}


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    """Compile every program once, in parallel: {name: (executable, compiler stderr)}."""
    out = tmp_path_factory.mktemp("emulator")

    def build(name):
        src, exe = out / f"{name}.cu", out / name
        src.write_text(PROGRAMS[name])
        proc = subprocess.run([GXX, *CXXFLAGS, "-x", "c++", str(src), "-o", str(exe)],
                              capture_output=True, text=True)
        return name, (exe if proc.returncode == 0 else None, proc.stderr)

    with ThreadPoolExecutor(len(PROGRAMS)) as pool:
        return dict(pool.map(build, PROGRAMS))


def run(programs, name, *args, stdin=None, expect_ok=True):
    exe, stderr = programs[name]
    if exe is None:
        pytest.fail(f"{name}.cu failed to compile:\n{stderr}")
    proc = subprocess.run([str(exe), *map(str, args)], input=stdin, capture_output=True,
                          text=True, timeout=120)
    if expect_ok:
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.rstrip().endswith("done"), proc.stdout
    return proc


def parse(stdout):
    """``name: v v v`` lines -> {name: [numpy arrays, one per occurrence]}."""
    values = {}
    for line in stdout.splitlines():
        key, sep, rest = line.partition(":")
        if sep:
            nums = [float(x) if any(ch in x for ch in ".en") else int(x) for x in rest.split()]
            values.setdefault(key, []).append(np.array(nums, dtype=object))
    return values


def only(values, key):
    (array,) = values[key]
    return array


# --------------------------------------------------------------------------- the header itself


def test_header_compiles_without_warnings(programs):
    for name, (exe, stderr) in programs.items():
        assert exe is not None, f"{name}.cu:\n{stderr}"
        assert "cuda_emulator.h" not in stderr, f"warnings from the header:\n{stderr}"


def test_qualifiers_intrinsics_and_min_max(programs):
    v = parse(run(programs, "sync", "misc").stdout)
    h = np.float16(0.1)
    assert list(only(v, "i")) == [
        1, 2, 2**32 - 1, 3, 7 + 9 - 3, 0x3F800000, 0xC0000000, 0x3FF8000000000000,
        8 + 100 * 31 + 10000 * 4, 12 + 1000 * 511,
    ]
    assert list(only(v, "f")) == [
        2.5, 1.0, 0.25, 2.0, float(np.float32(np.pi)), -1.0, 1.5, 0.25, 1.0, 5.0,
        float(h * h + np.float16(1)),
    ]


# --------------------------------------------------------------------------- block level


def test_block_reduction_with_shared_memory(programs):
    v = parse(run(programs, "sync", "block_reduce").stdout)
    data = np.arange(1000) % 17 - 5.0
    expected = [data[b * 256:(b + 1) * 256].sum() for b in range(4)]
    assert list(only(v, "sums")) == expected


def test_barrier_reused_many_times(programs):
    v = parse(run(programs, "sync", "barrier_loop").stdout)
    assert list(only(v, "out")) == [(t + 1001) % 160 for t in range(160)]
    count, all_true, all_but_7, any_159, any_none = only(v, "counts")
    assert count == sum(t % 3 == 0 for t in range(160))
    assert (all_true, all_but_7, any_159, any_none) == (1, 0, 1, 0)


def test_grid_stride_loop_and_3d_indices(programs):
    v = parse(run(programs, "sync", "grid_stride").stdout)
    assert list(only(v, "bad")) == [0]
    ids = list(only(v, "ids"))
    expected = []
    for bz in range(2):
        for by in range(2):
            for bx in range(3):
                for tz in range(2):
                    for ty in range(3):
                        for tx in range(4):
                            expected.append(bx | by << 4 | bz << 8 | tx << 12 | ty << 16 | tz << 20)
    assert ids == expected


def test_dynamic_shared_memory(programs):
    v = parse(run(programs, "sync", "dynamic_smem").stdout)
    for block, out, flags in zip((200, 64), v["out"], v["flags"]):
        n = 3 * block
        expected = [float(b * block + block - 1 - t) for b in range(3) for t in range(block)]
        assert list(out) == expected and len(out) == n
        assert list(flags) == [3, 3, 3]  # 16-byte aligned, and poisoned before every block


def test_atomics_from_many_threads(programs):
    v = {k: a[0] for k, a in parse(run(programs, "sync", "atomics").stdout).items()}
    n, t = 1024, np.arange(1024, dtype=np.int64)
    assert v["i"][0] == n and v["u"][0] == 2 * n and v["ull"][0] == 3 * n
    assert v["f"][0] == 0.5 * n and v["d"][0] == 0.25 * n
    k = (t * 7919) % 1000 - 500
    assert v["imax"][0] == k.max() and v["imin"][0] == k.min()
    u = (t.astype(np.uint64) * np.uint64(2654435761)) % np.uint64(2**32)
    assert v["umax"][0] == int(u.max()) and v["umin"][0] == int(((u + np.uint64(1)) % np.uint64(2**32)).min())
    w = np.where(t % 2 == 1, 1, -1) * t * 1000000007
    assert v["llmax"][0] == w.max() and v["llmin"][0] == w.min()
    assert v["ullmax"][0] == 1023 << 40 and v["ullmin"][0] == 5
    assert sorted(v["add_old"]) == list(range(n))  # each thread got a distinct old value
    olds = list(v["exch_old"]) + [v["exch_slot"][0]]
    assert sorted(olds) == [-1] + list(range(n))  # exchanges form one chain
    assert 0 <= v["fexch_slot"][0] < n
    assert v["cas_sum"][0] == n * (n - 1) // 2 and v["cas_i"][0] == n and v["cas_u"][0] == 3 * n


def test_block_of_1024_threads(programs):
    v = parse(run(programs, "sync", "block1024").stdout)
    data = (np.arange(1024) * 13) % 31
    assert list(only(v, "sums")) == [data.sum()] * 2
    assert list(only(v, "sum3d")) == [data.sum()]
    warp = np.repeat(data.reshape(32, 32).sum(axis=1), 32)
    assert list(only(v, "warp_sums")) == list(warp)
    assert list(only(v, "ballot1d")) == [1] * 32 + [0] * 992  # only thread 0 has x == 0
    assert list(only(v, "ballot3d")) == [0x01010101] * 1024  # block (8,16,8): x == 0 every 8 lanes
    assert list(only(v, "lin3d")) == list(range(1024))


# --------------------------------------------------------------------------- warp level


def expected_shuffle(values, mode, b, width=32):
    """CUDA's documented __shfl*_sync results for one full warp."""
    out = []
    for lane in range(32):
        group = lane // width
        if mode == "idx":
            src = group * width + b % width
        elif mode == "up":
            src = lane - b if lane % width >= b else lane
        elif mode == "down":
            src = lane + b if lane % width + b < width else lane
        else:  # xor: a later group is out of reach, the caller keeps its own value
            src = lane ^ b
            src = src if src // width <= group else lane
        out.append(values[src])
    return out


def test_warp_shuffles(programs):
    v = parse(run(programs, "sync", "shuffles").stdout)
    data = [int(x) for x in only(v, "in")]
    assert data == [(i * 37) % 101 - 50 for i in range(64)]
    for w in range(2):
        vals, lanes = data[32 * w:32 * w + 32], slice(32 * w, 32 * w + 32)
        total = sum(vals)
        assert list(only(v, "xor")[lanes]) == [total] * 32
        down = list(vals)
        for o in (16, 8, 4, 2, 1):
            down = [a + b for a, b in zip(down, expected_shuffle(down, "down", o))]
        assert list(only(v, "down")[lanes]) == down and down[0] == total
        scan = [sum(vals[(l // 8) * 8:l + 1]) for l in range(32)]
        assert list(only(v, "up8")[lanes]) == scan
        assert list(only(v, "idx")[lanes]) == [vals[3]] * 32
        lane_src = [expected_shuffle(vals, "idx", l + 5, 16)[l] for l in range(32)]
        assert list(only(v, "idx16")[lanes]) == lane_src
        assert list(only(v, "xor8")[lanes]) == expected_shuffle(vals, "xor", 12, 8)
        assert list(only(v, "fx")[lanes]) == [total * 0.5] * 32
        assert list(only(v, "dx")[lanes]) == [total * 0.25] * 32
        assert list(only(v, "llx")[lanes]) == [total * 3000000000] * 32
        assert list(only(v, "ux")[lanes]) == [(total * 7) % 2**32] * 32
        assert list(only(v, "ullx")[lanes]) == [(total << 33) % 2**64] * 32


def test_votes(programs):
    v = parse(run(programs, "sync", "votes").stdout)
    for w in range(2):
        lanes = range(32 * w, 32 * w + 32)
        mask = sum(1 << (t - 32 * w) for t in lanes if t % 3 == 0)
        assert all(only(v, "ballot")[t] == mask for t in lanes)
        assert all(only(v, "any5")[t] == (w == 0) for t in lanes)
        assert all(only(v, "all_small")[t] == 1 for t in lanes)
        assert all(only(v, "all_not40")[t] == (w == 0) for t in lanes)
        assert all(only(v, "active")[t] == 0xFFFFFFFF for t in lanes)


def test_partial_last_warp(programs):
    v = parse(run(programs, "sync", "partial_warp").stdout)
    for blk in range(2):
        vals = [t + 1 + 100 * blk for t in range(48)]
        assert only(v, "totals")[blk] == sum(vals)
        g = lambda t: 48 * blk + t  # noqa: E731
        for t in range(48):
            seg = (t // 16) * 16
            assert only(v, "seg16")[g(t)] == sum(vals[seg:seg + 16])
            full = t < 32
            assert only(v, "ballot")[g(t)] == (0x55555555 if full else 0x5555)
            assert only(v, "active")[g(t)] == (0xFFFFFFFF if full else 0xFFFF)
            assert only(v, "anyall")[g(t)] == (2 if full else 3)  # any(t == 40) only in warp 1
            # a missing source lane gives the caller's own value (undefined on CUDA)
            assert only(v, "from20")[g(t)] == (vals[20] if full else vals[t])
            src = t + 8 if (t % 32) + 8 < (32 if full else 16) else t
            assert only(v, "down8")[g(t)] == vals[src]


# --------------------------------------------------------------------------- failures


@pytest.mark.parametrize(
    "case, message",
    [
        ("early_return", "divergent barrier"),
        ("return_while_waiting", "returned while 40 thread(s)"),
        ("mixed_barriers", "deadlock"),
        ("partial_mask", "full-warp masks only"),
        ("stack_overflow", "fiber stack overflow"),
    ],
)
def test_misuse_aborts_with_a_message(programs, case, message):
    proc = run(programs, "sync", case, expect_ok=False)
    assert proc.returncode != 0
    assert "done" not in proc.stdout
    assert message in proc.stderr, proc.stderr


# --------------------------------------------------------------------------- half / bfloat16


def float32_patterns(rng):
    """Float32 bit patterns: a sweep, random ones, and every rounding boundary of both types."""
    u32 = [np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32),
           rng.integers(0, 2**32, 500_000, dtype=np.uint64).astype(np.uint32)]
    specials = [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7F800001, 0x7FC00000, 0xFFFFFFFF,
                0x7FA00000, 0x7F802000, 0xFF801FFF, 0x00000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF,
                0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x33000000, 0x33000001, 0x32FFFFFF,
                0x387FC000, 0x38800000, 0x7F7F8000, 0x7F7F7FFF, 0x7F7FFFFF]
    u32.append(np.array(specials, dtype=np.uint32))
    f = []
    for bits, dtype in ((np.arange(0x7C00, dtype=np.uint16), np.float16),
                        (np.arange(0x7F80, dtype=np.uint16), None)):
        import ml_dtypes

        vals = bits.view(dtype or ml_dtypes.bfloat16).astype(np.float64)
        mid = ((vals[:-1] + vals[1:]) / 2).astype(np.float32)  # exact: needs 12 / 9 bits
        f += [mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(0))]
    fs = np.concatenate(f)
    u32 += [fs.view(np.uint32), (-fs).view(np.uint32)]
    return np.concatenate(u32).view(np.float32)


def same_bits(got, want, kind):
    """Bit-identical, except that a NaN only has to stay a NaN of the same sign."""
    got_f, want_f = got.view(kind), want.view(kind)
    nan = np.isnan(want_f.astype(np.float32))
    sign = np.uint16(0x8000) if got.dtype == np.uint16 else np.uint32(0x80000000)
    assert np.array_equal(np.isnan(got_f.astype(np.float32)), nan)
    assert np.array_equal(got[nan] & sign, want[nan] & sign)
    bad = np.flatnonzero((got != want) & ~nan)
    assert bad.size == 0, f"{bad.size} mismatches, first: got {got[bad[:5]]} want {want[bad[:5]]}"


def test_half_and_bfloat16_conversions(programs, tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(7)
    f32 = float32_patterns(rng)
    # doubles: half rounding boundaries nudged by far less than a float ulp (double
    # rounding through float would get these wrong), random values, specials
    halves = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    mid = (halves[:-1] + halves[1:]) / 2
    with np.errstate(invalid="ignore"):
        f32_as_f64 = f32.astype(np.float64)
    f64 = np.concatenate([mid, mid * (1 + 2.0**-40), mid * (1 - 2.0**-40), -mid,
                          rng.uniform(-7e4, 7e4, 100_000), rng.standard_normal(100_000) * 1e-6,
                          f32_as_f64, [1 + 2.0**-8 + 2.0**-40, np.inf, -np.inf, np.nan]])
    pairs = rng.integers(0, 2**16, 400_000, dtype=np.uint64).astype(np.uint16)
    f32.tofile(tmp_path / "f32")
    f64.tofile(tmp_path / "f64")
    pairs.tofile(tmp_path / "pairs")
    run(programs, "convert", tmp_path / "f32", tmp_path / "f64", tmp_path / "pairs", tmp_path)
    out = lambda name, dt: np.fromfile(tmp_path / name, dtype=dt)  # noqa: E731
    bf16 = ml_dtypes.bfloat16
    with np.errstate(all="ignore"):
        same_bits(out("fh", np.uint16), f32.astype(np.float16).view(np.uint16), np.float16)
        same_bits(out("fb", np.uint16), f32.astype(bf16).view(np.uint16), bf16)
        same_bits(out("dh", np.uint16), f64.astype(np.float16).view(np.uint16), np.float16)
        # ml_dtypes rounds double -> float -> bfloat16; compare where that is exact, and
        # check the one planted double-rounding case for the correctly rounded answer
        db = out("db", np.uint16)
        exact = f64.astype(np.float32).astype(np.float64) == f64
        exact |= np.isnan(f64)
        same_bits(db[exact], f64[exact].astype(bf16).view(np.uint16), bf16)
        assert db[len(f64) - 4] == 0x3F81  # 1 + 2^-8 + 2^-40 rounds up, not to even
        all16 = np.arange(2**16, dtype=np.uint16)
        same_bits(out("hf", np.uint32), all16.view(np.float16).astype(np.float32).view(np.uint32),
                  np.float32)
        same_bits(out("bf", np.uint32), all16.view(bf16).astype(np.float32).view(np.uint32),
                  np.float32)
        flags = out("flags", np.uint8)
        h, b = all16.view(np.float16), all16.view(bf16).astype(np.float32)
        assert np.array_equal(flags & 1 != 0, np.isnan(h))
        assert np.array_equal(flags & 2 != 0, np.isnan(b))
        assert np.array_equal(flags & 4 != 0, np.isinf(h))
        assert np.array_equal(flags & 8 != 0, np.isinf(b))
        assert np.array_equal(out("habs", np.uint16), all16 & 0x7FFF)
        assert np.array_equal(out("babs", np.uint16), all16 & 0x7FFF)
        a, c = pairs[0::2].view(np.float16), pairs[1::2].view(np.float16)
        got = out("arith", np.uint16).reshape(-1, 4)
        for col, want in enumerate((a + c, a - c, a * c, a / c)):
            same_bits(got[:, col].copy(), want.view(np.uint16), np.float16)


# --------------------------------------------------------------------------- WMMA


def test_wmma_16x16x16_half_and_bfloat16(programs):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(3)
    m, n, k, scale = 32, 32, 48, 0.5
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)
    # f16 run: B and C are passed column-major; bf16 run: row-major (see WMMA_CU)
    a16, b16 = a.astype(np.float16).astype(np.float32), b.astype(np.float16).astype(np.float32)
    abf = a.astype(ml_dtypes.bfloat16).astype(np.float32)
    bbf = b.astype(ml_dtypes.bfloat16).astype(np.float32)
    text = f"{m} {n} {k} {scale}\n"
    for variant, aa, bb, b_store, c_store in (("f16", a16, b16, b16.T, c.T), ("bf16", abf, bbf, bbf, c)):
        stdin = text + "\n".join(" ".join(f"{x:.9g}" for x in arr.ravel()) for arr in (aa, b_store, c_store))
        proc = run(programs, "wmma", variant, stdin=stdin + "\n")
        d = np.array(only(parse(proc.stdout), "D"), dtype=np.float32).reshape(m, n)
        want = scale * (aa @ bb + c)  # float32 products and sums
        np.testing.assert_allclose(d, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


# --------------------------------------------------------------------------- cp.async

CP_ASYNC_CU = r"""
#include "cuda_emulator.h"
// Each of 32 threads copies 16 bytes (4 floats) of src into its slot of s, two commit
// groups (the first and second halves of its slot pair), and reports what it reads of
// its slots after each step: before a wait nothing has landed, wait(1) lands the older
// group only, wait(0) the rest.
__global__ void k(const float* src, float* out) {
  __shared__ float s[32 * 8];
  const int t = threadIdx.x;
  for (int i = 0; i < 8; ++i) s[8 * t + i] = -1.0f;
  emu::cp_async(&s[8 * t], &src[8 * t]);
  emu::cp_async_commit();
  emu::cp_async(&s[8 * t + 4], t % 2 ? &src[8 * t + 4] : nullptr);  // null: 16 zero bytes
  out[3 * t] = s[8 * t];      // issued, not waited for
  emu::cp_async_commit();
  emu::cp_async_wait(1);
  out[3 * t + 1] = s[8 * t] + 1000.0f * s[8 * t + 4];  // the first group only
  emu::cp_async_wait(0);
  out[3 * t + 2] = s[8 * t + 4];
}
int main() {
  float src[256], out[96];
  for (int i = 0; i < 256; ++i) src[i] = float(i);
  emu::launch(k, dim3(1), dim3(32), 0, src, out);
  for (int i = 0; i < 96; ++i) std::printf("%g ", out[i]);
  std::printf("\n");
}
"""


def test_cp_async_copies_land_only_when_their_group_is_waited_for(tmp_path):
    """A stage read before its copies are waited for must read stale memory on the
    emulator, as it may on the GPU: that is what checks the contraction's pipeline."""
    src, exe = tmp_path / "cp.cu", tmp_path / "cp"
    src.write_text(CP_ASYNC_CU)
    subprocess.run([GXX, *CXXFLAGS, "-x", "c++", str(src), "-o", str(exe)], check=True, capture_output=True)
    out = np.array(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split(),
                   dtype=float).reshape(32, 3)
    t = np.arange(32)
    assert np.array_equal(out[:, 0], np.full(32, -1.0))  # nothing landed before a wait
    assert np.array_equal(out[:, 1], 8.0 * t - 1000.0)  # wait(1): the first group, not the second
    assert np.array_equal(out[:, 2], np.where(t % 2, 8.0 * t + 4, 0.0))  # wait(0): the rest, zero-filled
