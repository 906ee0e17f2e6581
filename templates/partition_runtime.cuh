// Device helpers shared by every generated kernel: storage conversions, the
// rounding that keeps fused chains bit-identical to unfused ones, NaN-propagating
// max/min, and math wrappers overloaded for float and double.
//
// With -DPARTITION_EMULATOR the same source compiles with g++ against the CPU
// emulator (backends/cuda/emulator/cuda_emulator.h) instead of the CUDA headers.
#pragma once
#ifdef PARTITION_EMULATOR
#include "cuda_emulator.h"
#define PART_DYNAMIC_SMEM(name) unsigned char* name = emu_dynamic_smem()
#else
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>
#define PART_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif
#include <stdint.h>

#define PART_DEV __device__ __forceinline__

// ---- memory accesses, named for the emulator's counters (docs/backends.md, "Counters"):
// PART_LDG(x[i]) reads global memory, PART_STG(y[i]) = v writes it, PART_LDS and PART_STS
// the same in shared memory; PART_REGION("main loop") names the accesses of the
// enclosing scope. On the GPU, and on the emulator unless it counts (-DEMU_PROFILE),
// each is the access itself (PART_LDG(x[i]) is x[i]) and a region is nothing.
#if defined(PARTITION_EMULATOR) && defined(EMU_PROFILE)
#define PART_LDG(...) EMU_ACCESS(::emu::prof::LDG, __VA_ARGS__)
#define PART_STG(...) EMU_ACCESS(::emu::prof::STG, __VA_ARGS__)
#define PART_LDS(...) EMU_ACCESS(::emu::prof::LDS, __VA_ARGS__)
#define PART_STS(...) EMU_ACCESS(::emu::prof::STS, __VA_ARGS__)
#define PART_REGION(name) EMU_REGION(name)
#else
#define PART_LDG(...) (__VA_ARGS__)
#define PART_STG(...) (__VA_ARGS__)
#define PART_LDS(...) (__VA_ARGS__)
#define PART_STS(...) (__VA_ARGS__)
#define PART_REGION(name)
#endif

// ---- wrapping integer arithmetic, for every integer type. NumPy computes in the
// operands' dtype and wraps there; in C++ signed overflow is UB, and the 8- and 16-bit
// types promote to int first (65535 * 65535 overflows int, where uint16 wraps), so the
// arithmetic is done in uint64_t, which wraps by definition, and converted back to T.
template <class T> PART_DEV T part_wrap_add(T a, T b) { return (T)((uint64_t)a + (uint64_t)b); }
template <class T> PART_DEV T part_wrap_sub(T a, T b) { return (T)((uint64_t)a - (uint64_t)b); }
template <class T> PART_DEV T part_wrap_mul(T a, T b) { return (T)((uint64_t)a * (uint64_t)b); }
// Whether T is signed: only a signed T has negative values, and -1 (an unsigned (T)-1
// is the largest value, the all-ones one, a value like any other). part_is_negative
// compares with 0 only where that means something (nvcc warns of a pointless comparison).
template <class T> PART_DEV constexpr bool part_is_signed() { return (T)-1 < (T)0; }
template <class T> PART_DEV bool part_is_negative(T x) {
  if constexpr (part_is_signed<T>()) return x < (T)0;
  else return false;
}

// ---- storage -> register (half types compute in float32)
PART_DEV float part_load(__half x) { return __half2float(x); }
PART_DEV float part_load(__nv_bfloat16 x) { return __bfloat162float(x); }
PART_DEV float part_load(float x) { return x; }
PART_DEV double part_load(double x) { return x; }
PART_DEV int8_t part_load(int8_t x) { return x; }
PART_DEV int32_t part_load(int32_t x) { return x; }
PART_DEV int64_t part_load(int64_t x) { return x; }
PART_DEV bool part_load(bool x) { return x; }
PART_DEV uint8_t part_load(uint8_t x) { return x; }
PART_DEV int16_t part_load(int16_t x) { return x; }
PART_DEV uint16_t part_load(uint16_t x) { return x; }
PART_DEV uint32_t part_load(uint32_t x) { return x; }
PART_DEV uint64_t part_load(uint64_t x) { return x; }

// ---- 8-bit floats (format 1.1), stored as their bits: ml_dtypes' float8_e4m3fn (no
// infinities, NaN = S.1111.111, largest 448) and float8_e5m2 (IEEE-like, largest 57344).
// Encoded from double with one round-to-nearest-even, so a float or double result
// rounds once, as the NumPy reference's cast does.
struct part_fp8e4m3 { uint8_t bits; };
struct part_fp8e5m2 { uint8_t bits; };

template <int E, int M, bool FN> PART_DEV uint8_t part_fp8_encode(double x) {
  const int bias = (1 << (E - 1)) - 1, emin = 1 - bias;
  const double largest = FN ? ldexp(2.0 - ldexp(1.0, 1 - M), (1 << E) - 1 - bias)
                            : ldexp(2.0 - ldexp(1.0, -M), (1 << E) - 2 - bias);
  const uint8_t sign = signbit(x) ? 0x80 : 0, nan = FN ? 0x7F : (uint8_t)(0x7C | 0x02);
  if (x != x) return sign | nan;
  double a = fabs(x);
  int e;
  frexp(a, &e);
  e = (e - 1 < emin) ? emin : e - 1;              // exponent of a's binade (subnormals: emin)
  const double r = rint(ldexp(a, M - e)) * ldexp(1.0, e - M);  // exact scaling; rint ties to even
  if (r > largest) return FN ? (sign | nan) : (uint8_t)(sign | (((1 << E) - 1) << M));  // NaN or inf
  if (r < ldexp(1.0, emin)) return sign | (uint8_t)rint(ldexp(r, M - emin));          // subnormal
  int er;
  frexp(r, &er);
  er -= 1;
  return sign | (uint8_t)((er + bias) << M) | (uint8_t)(rint(ldexp(r, M - er)) - (1 << M));
}
template <int E, int M, bool FN> PART_DEV float part_fp8_decode(uint8_t b) {
  const int bias = (1 << (E - 1)) - 1, exp = (b >> M) & ((1 << E) - 1), man = b & ((1 << M) - 1);
  const float sign = (b & 0x80) ? -1.0f : 1.0f;
  if (FN ? (exp == (1 << E) - 1 && man == (1 << M) - 1) : (exp == (1 << E) - 1 && man != 0)) return NAN;
  if (!FN && exp == (1 << E) - 1) return sign * INFINITY;
  if (exp == 0) return sign * ldexpf((float)man, 1 - bias - M);
  return sign * ldexpf((float)((1 << M) + man), exp - bias - M);
}
PART_DEV float part_load(part_fp8e4m3 x) { return part_fp8_decode<4, 3, true>(x.bits); }
PART_DEV float part_load(part_fp8e5m2 x) { return part_fp8_decode<5, 2, false>(x.bits); }
PART_DEV part_fp8e4m3 part_to_fp8e4m3(double x) { return part_fp8e4m3{part_fp8_encode<4, 3, true>(x)}; }
PART_DEV part_fp8e5m2 part_to_fp8e5m2(double x) { return part_fp8e5m2{part_fp8_encode<5, 2, false>(x)}; }
PART_DEV float part_round_fp8e4m3(double x) { return part_fp8_decode<4, 3, true>(part_fp8_encode<4, 3, true>(x)); }
PART_DEV float part_round_fp8e5m2(double x) { return part_fp8_decode<5, 2, false>(part_fp8_encode<5, 2, false>(x)); }

// ---- register -> storage
PART_DEV __half part_to_f16(float x) { return __float2half_rn(x); }
PART_DEV __nv_bfloat16 part_to_bf16(float x) { return __float2bfloat16_rn(x); }

// ---- rounding a float32 result to a half type, kept in a float register
PART_DEV float part_round_f16(float x) { return __half2float(__float2half_rn(x)); }
PART_DEV float part_round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
// An integer rounded once to bfloat16, as ml_dtypes converts it: through float32 it would
// round twice (2^24 + 2^16 + 1 would become 2^24, not 2^24 + 2^17). The magnitude is
// first cut to float32's 24 significant bits rounding to odd (bits cut off set the last
// kept one), which float32 holds exactly and which rounds to bfloat16 as the integer
// itself does. float16 needs none of this: an integer that float32 rounds is at least
// 2^24, past float16's largest value whichever way it rounds.
template <class T> PART_DEV float part_round_bf16_int(T x) {
  const bool negative = part_is_negative(x);
  uint64_t m = negative ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
  int cut = 0;
  while ((m >> cut) >= (1ull << 24)) ++cut;
  if (cut) m = ((m >> cut) | (uint64_t)((m & ((1ull << cut) - 1)) != 0)) << cut;
  const float f = (float)m;
  return part_round_bf16(negative ? -f : f);
}

// ---- float -> integer conversions as NumPy does them on x86-64: truncation toward
// zero; NaN and out-of-range values give the most negative value (cvttss2si).
template <class F> PART_DEV int64_t part_to_int64(F x) {
  return (x >= (F)-9223372036854775808.0 && x < (F)9223372036854775808.0) ? (int64_t)x : INT64_MIN;
}
template <class F> PART_DEV int32_t part_to_int32(F x) {
  return (x >= (F)-2147483648.0 && x < (F)2147483648.0) ? (int32_t)x : INT32_MIN;
}
template <class F> PART_DEV int8_t part_to_int8(F x) { return (int8_t)part_to_int32(x); }
template <class F> PART_DEV int16_t part_to_int16(F x) { return (int16_t)part_to_int32(x); }
template <class F> PART_DEV uint8_t part_to_uint8(F x) { return (uint8_t)part_to_int32(x); }
template <class F> PART_DEV uint16_t part_to_uint16(F x) { return (uint16_t)part_to_int32(x); }
// unsigned 32 and 64 bits: the upper half through the signed conversion of x - 2^31 (2^63)
template <class F> PART_DEV uint32_t part_to_uint32(F x) {
  return x >= (F)2147483648.0 ? (uint32_t)part_to_int32(x - (F)2147483648.0) + 2147483648u
                              : (uint32_t)part_to_int32(x);
}
template <class F> PART_DEV uint64_t part_to_uint64(F x) {
  return x >= (F)9223372036854775808.0 ? (uint64_t)part_to_int64(x - (F)9223372036854775808.0) + 9223372036854775808ull
                                        : (uint64_t)part_to_int64(x);
}

// ---- NaN-propagating maximum/minimum (NumPy's maximum, not fmax)
PART_DEV float part_max(float a, float b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }
PART_DEV float part_min(float a, float b) { return (a != a || b != b) ? a + b : (a < b ? a : b); }
PART_DEV double part_max(double a, double b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }
PART_DEV double part_min(double a, double b) { return (a != a || b != b) ? a + b : (a < b ? a : b); }
template <class T> PART_DEV T part_max(T a, T b) { return a > b ? a : b; }
template <class T> PART_DEV T part_min(T a, T b) { return a < b ? a : b; }

// ---- math, float and double
PART_DEV float part_exp(float x) { return expf(x); }
PART_DEV double part_exp(double x) { return exp(x); }
PART_DEV float part_log(float x) { return logf(x); }
PART_DEV double part_log(double x) { return log(x); }
PART_DEV float part_sqrt(float x) { return sqrtf(x); }
PART_DEV double part_sqrt(double x) { return sqrt(x); }
PART_DEV float part_tanh(float x) { return tanhf(x); }
PART_DEV double part_tanh(double x) { return tanh(x); }
PART_DEV float part_erf(float x) { return erff(x); }
PART_DEV double part_erf(double x) { return erf(x); }
PART_DEV float part_sin(float x) { return sinf(x); }
PART_DEV double part_sin(double x) { return sin(x); }
PART_DEV float part_cos(float x) { return cosf(x); }
PART_DEV double part_cos(double x) { return cos(x); }
PART_DEV float part_pow(float a, float b) { return powf(a, b); }
PART_DEV double part_pow(double a, double b) { return pow(a, b); }
PART_DEV float part_abs(float x) { return fabsf(x); }
PART_DEV double part_abs(double x) { return fabs(x); }
// an integer's: the lowest signed value is its own absolute value, as in NumPy (wraps)
template <class T> PART_DEV T part_abs(T x) { return part_is_negative(x) ? part_wrap_sub((T)0, x) : x; }
PART_DEV float part_trunc(float x) { return truncf(x); }
PART_DEV double part_trunc(double x) { return trunc(x); }
template <class T> PART_DEV T part_trunc(T x) { return x; }  // an integer or bool is its own truncation
template <class T> PART_DEV T part_sigmoid(T x) { return (T)1 / ((T)1 + part_exp(-x)); }
template <class T> PART_DEV T part_gelu(T x) { return (T)0.5 * x * ((T)1 + part_erf(x * (T)0.70710678118654752440)); }
template <class T> PART_DEV T part_gelu_tanh(T x) {
  return (T)0.5 * x * ((T)1 + part_tanh((T)0.79788456080286535588 * (x + (T)0.044715 * x * x * x)));
}

// ---- integer pow, wrapping in T as NumPy's does; a negative exponent (signed T only)
// truncates like C integer division: 1 for a base of 1, +-1 for -1, 0 otherwise.
template <class T> PART_DEV T part_ipow(T base, T e) {
  if (part_is_negative(e))
    return base == (T)1 ? (T)1 : (base == (T)-1 ? ((e & 1) ? (T)-1 : (T)1) : (T)0);
  T result = 1;
  while (e != (T)0) {
    if (e & 1) result = part_wrap_mul(result, base);
    base = part_wrap_mul(base, base);
    e = (T)(e >> 1);
  }
  return result;
}

// ---- floor division and remainder as NumPy computes them. Integers: x // 0 and x % 0
// are 0, a division by -1 negates with wrap-around (INT_MIN // -1 is INT_MIN; in C++ it
// overflows, and traps on x86-64), and the quotient rounds toward -inf, the remainder
// taking the divisor's sign. Only a signed divisor is tested for -1 (part_is_signed):
// an unsigned (T)-1 is the largest value, a divisor like any other (5u // 0xFFFFFFFFu
// is 0 and 5u % 0xFFFFFFFFu is 5), and an unsigned quotient needs no rounding.
template <class T> PART_DEV T part_floor_divide(T a, T b) {
  if (b == (T)0) return 0;
  if (part_is_signed<T>() && b == (T)-1) return part_wrap_sub((T)0, a);
  const T q = (T)(a / b);
  return (a % b != 0 && part_is_negative(a) != part_is_negative(b)) ? (T)(q - 1) : q;
}
template <class T> PART_DEV T part_remainder(T a, T b) {
  if (b == (T)0 || (part_is_signed<T>() && b == (T)-1)) return 0;
  const T r = (T)(a % b);
  return (r != 0 && part_is_negative(r) != part_is_negative(b)) ? (T)(r + b) : r;
}
// C's fmod of integers, as NumPy's: the remainder of the truncating division, with the
// dividend's sign; x fmod 0 is 0, and a divisor of -1 gives 0 without computing
// INT_MIN % -1 (it overflows in C++, and traps on x86-64). Only a signed divisor is
// tested for -1, as above.
template <class T> PART_DEV T part_fmod(T a, T b) {
  if (b == (T)0 || (part_is_signed<T>() && b == (T)-1)) return 0;
  return (T)(a % b);
}
// Floats: NumPy's npy_divmod step for step (fmod, then the quotient snapped to an
// integer), so signs of zero, inf and NaN come out as NumPy's; b == 0 gives a / b and
// fmod's NaN. None of these operations is a multiply-add nvcc could contract. fmod
// itself (the op, and npy_divmod's first step) is exact in IEEE arithmetic: fmodf and
// fmod give NumPy's value bit for bit.
PART_DEV float part_fmod(float a, float b) { return fmodf(a, b); }
PART_DEV double part_fmod(double a, double b) { return fmod(a, b); }
PART_DEV float part_floor(float x) { return floorf(x); }
PART_DEV double part_floor(double x) { return floor(x); }
PART_DEV float part_copysign(float x, float s) { return copysignf(x, s); }
PART_DEV double part_copysign(double x, double s) { return copysign(x, s); }
template <class F> PART_DEV F part_divmod(F a, F b, F& mod) {
  mod = part_fmod(a, b);
  if (b == 0) return a / b;
  F div = (a - mod) / b;
  if (mod != 0) {  // NaN too, as NumPy's `if (mod)`
    if ((b < 0) != (mod < 0)) {
      mod += b;
      div -= (F)1;
    }
  } else {
    mod = part_copysign((F)0, b);
  }
  if (div == 0) return part_copysign((F)0, a / b);
  F floordiv = part_floor(div);
  if (div - floordiv > (F)0.5) floordiv += (F)1;
  return floordiv;
}
PART_DEV float part_floor_divide(float a, float b) { float mod; return part_divmod(a, b, mod); }
PART_DEV double part_floor_divide(double a, double b) { double mod; return part_divmod(a, b, mod); }
PART_DEV float part_remainder(float a, float b) { float mod; part_divmod(a, b, mod); return mod; }
PART_DEV double part_remainder(double a, double b) { double mod; part_divmod(a, b, mod); return mod; }

// ---- fixed-width vectors for 16-byte loads and stores
template <class T, int N> struct __align__(sizeof(T) * N) part_vec { T v[N]; };

// ---- asynchronous 16-byte copies from global to shared memory (cp.async, sm_80+), in
// commit groups, for multi-stage pipelines.
// part_cp_async16(dst, src, base): *dst = *src, or 16 zero bytes when src is null (an
// element out of bounds: cp.async with a source size of 0, reading nothing at base, a
// valid address). part_cp_async_commit() closes the thread's current group of copies;
// part_cp_async_wait<N>() returns once all but the newest N committed groups have landed
// (cp.async.wait_group N; PTX ISA, "Data Movement and Conversion Instructions:
// cp.async"). The emulator lands each copy only then (emu::cp_async), so a stage read
// too early reads stale memory there too; GPUs before sm_80 copy at once.
template <class V> PART_DEV void part_cp_async16(V* dst, const V* src, const void* base) {
  static_assert(sizeof(V) == 16, "cp.async copies 16 bytes");
#if defined(PARTITION_EMULATOR)
  (void)base;
  emu::cp_async(dst, src);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned slot = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(slot), "l"(src ? static_cast<const void*>(src) : base),
               "r"(src ? 16 : 0));
#else
  (void)base;
  if (src) {
    *dst = *src;
  } else {
    unsigned char* bytes = reinterpret_cast<unsigned char*>(dst);
    for (int i = 0; i < 16; ++i) bytes[i] = 0;
  }
#endif
}
PART_DEV void part_cp_async_commit() {
#if defined(PARTITION_EMULATOR)
  emu::cp_async_commit();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N> PART_DEV void part_cp_async_wait() {
#if defined(PARTITION_EMULATOR)
  emu::cp_async_wait(N);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// ---- reductions: combine functions and warp-level reduction by butterfly shuffles
struct part_sum_op {
  PART_DEV float operator()(float a, float b) const { return a + b; }
  PART_DEV double operator()(double a, double b) const { return a + b; }
  PART_DEV int64_t operator()(int64_t a, int64_t b) const { return part_wrap_add(a, b); }
  PART_DEV uint64_t operator()(uint64_t a, uint64_t b) const { return a + b; }  // unsigned: wraps by definition
};
struct part_prod_op {
  PART_DEV float operator()(float a, float b) const { return a * b; }
  PART_DEV double operator()(double a, double b) const { return a * b; }
  PART_DEV int64_t operator()(int64_t a, int64_t b) const { return part_wrap_mul(a, b); }
  PART_DEV uint64_t operator()(uint64_t a, uint64_t b) const { return a * b; }
};
struct part_max_op {
  template <class T> PART_DEV T operator()(T a, T b) const { return part_max(a, b); }
};
struct part_min_op {
  template <class T> PART_DEV T operator()(T a, T b) const { return part_min(a, b); }
};
template <class T, class Op> PART_DEV T part_warp_reduce(T v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, (T)__shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
// argmax/argmin: the first NaN wins, then the extreme value, then the lowest index (NumPy).
template <bool MAX, class T> PART_DEV bool part_arg_better(T v2, int64_t i2, T v, int64_t i) {
  const bool nan2 = v2 != v2, nan = v != v;
  if (nan || nan2) return nan2 && (!nan || i2 < i);
  if (MAX ? v2 > v : v2 < v) return true;
  return v2 == v && i2 < i;
}
template <bool MAX, class T> PART_DEV void part_warp_arg(T& v, int64_t& i) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const T v2 = (T)__shfl_xor_sync(0xffffffffu, v, offset);
    const int64_t i2 = (int64_t)__shfl_xor_sync(0xffffffffu, i, offset);
    if (part_arg_better<MAX>(v2, i2, v, i)) { v = v2; i = i2; }
  }
}

// ---- tensor-core products: mma.sync.m16n8k16, D = A(16x16) * B(16x8) + C, float32
// accumulators. Fragment layout of the PTX ISA ("Matrix Fragments for mma.m16n8k16 with
// floating point type"), lane = 4 * g + t:
//   A element i (0..7): row g + 8 * ((i >> 1) & 1), column 2 * t + (i & 1) + 8 * (i >> 2)
//   B element i (0..3): row 2 * t + (i & 1) + 8 * (i >> 1), column g
//   C element i (0..3): row g + 8 * (i >> 1),      column 2 * t + (i & 1)
// For 16-bit types two consecutive elements share a 32-bit register, the lower index
// in the low half, which is the memory order of the arrays below. float32 operands
// take the same layout and multiply on CUDA cores (exact float32 products, no TF32).
template <class T> struct __align__(16) part_frag_a { T x[8]; };
template <class T> struct __align__(8) part_frag_b { T x[4]; };
PART_DEV int part_frag_a_row(int g, int i) { return g + 8 * ((i >> 1) & 1); }
PART_DEV int part_frag_a_col(int t, int i) { return 2 * t + (i & 1) + 8 * (i >> 2); }
PART_DEV int part_frag_b_row(int t, int i) { return 2 * t + (i & 1) + 8 * (i >> 1); }
PART_DEV int part_frag_c_row(int g, int i) { return g + 8 * (i >> 1); }
PART_DEV int part_frag_c_col(int t, int i) { return 2 * t + (i & 1); }

// ---- ldmatrix (sm_75+): the warp loads N 8x8 matrices of 16-bit elements from shared
// memory. Lanes 8i..8i+7 give the 16-byte rows of matrix i (lanes past 8N: ignored), and
// each lane receives, of each matrix i, row lane / 4, columns 2 (lane % 4) and + 1
// (TRANS: column lane / 4, rows 2 (lane % 4) and + 1) as out[2i], out[2i + 1]: the
// mma.sync fragment order above. Rows must be 16-byte aligned.
#ifdef PARTITION_EMULATOR
template <int N, bool TRANS, class T> PART_DEV void part_ldmatrix(T* out, const T* row) {
  static_assert(sizeof(T) == 2 && (N == 1 || N == 2 || N == 4), "ldmatrix loads 1, 2 or 4 matrices of 16-bit elements");
  const T* rows[32];
  emu::warp_allgather(row, rows);
  const int lane = threadIdx.x % 32;
#ifdef EMU_PROFILE
  if (lane == 0) {
    static emu::prof::Site site{emu::prof::LDS, "ldmatrix", __FILE__, __LINE__, -1};
    uintptr_t addr[32] = {};
    for (int i = 0; i < 8 * N; ++i) addr[i] = reinterpret_cast<uintptr_t>(rows[i]);
    emu::prof::warp_request(&site, 16, addr, N == 4 ? ~0u : (1u << (8 * N)) - 1);
  }
#endif
  for (int i = 0; i < N; ++i)
    for (int e = 0; e < 2; ++e)
      out[2 * i + e] = TRANS ? rows[8 * i + 2 * (lane % 4) + e][lane / 4] : rows[8 * i + lane / 4][2 * (lane % 4) + e];
}
#else
template <int N, bool TRANS, class T> PART_DEV void part_ldmatrix(T* out, const T* row) {
  static_assert(sizeof(T) == 2 && (N == 2 || N == 4), "ldmatrix loads 2 or 4 matrices of 16-bit elements");
  uint32_t* r = reinterpret_cast<uint32_t*>(out);
  const unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if (N == 4 && TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at));
  else if (N == 4)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at));
  else if (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(at));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(at));
}
#endif

#ifdef PARTITION_EMULATOR
// The emulator gathers the warp's fragments and computes this lane's four outputs,
// products and sums in float32, k ascending, starting from c (half types: the float32
// product below is plain CUDA and runs on the emulator as it is).
template <class T> PART_DEV void part_mma(float c[4], const part_frag_a<T>& a, const part_frag_b<T>& b) {
#ifdef EMU_PROFILE
  emu::prof::warp_op(emu::prof::MMA);
#endif
  struct Both { part_frag_a<T> a; part_frag_b<T> b; };
  Both mine{a, b}, all[32];
  emu::warp_allgather(mine, all);
  float A[16][16], B[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 8; ++i) A[part_frag_a_row(g, i)][part_frag_a_col(t, i)] = float(all[lane].a.x[i]);
    for (int i = 0; i < 4; ++i) B[part_frag_b_row(t, i)][g] = float(all[lane].b.x[i]);
  }
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    float acc = c[i];
    for (int k = 0; k < 16; ++k) acc += A[part_frag_c_row(g, i)][k] * B[k][part_frag_c_col(t, i)];
    c[i] = acc;
  }
}
#else
PART_DEV void part_mma(float c[4], const part_frag_a<__half>& a, const part_frag_b<__half>& b) {
  const uint32_t* ra = reinterpret_cast<const uint32_t*>(a.x);
  const uint32_t* rb = reinterpret_cast<const uint32_t*>(b.x);
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));
}
PART_DEV void part_mma(float c[4], const part_frag_a<__nv_bfloat16>& a, const part_frag_b<__nv_bfloat16>& b) {
  const uint32_t* ra = reinterpret_cast<const uint32_t*>(a.x);
  const uint32_t* rb = reinterpret_cast<const uint32_t*>(b.x);
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));
}
#endif

// A warp's FM x FN grid of products, c[i][j] += a[i] * b[j], each an m16n8k16 part_mma
// (the contraction's warp tile). The emulator gathers the warp's fragments once for the
// whole grid, products and sums in float32, k ascending, starting from c, as part_mma.
#ifdef PARTITION_EMULATOR
template <int FM, int FN, class T>
PART_DEV void part_mma_tile(float (&c)[FM][FN][4], const part_frag_a<T> (&a)[FM], const part_frag_b<T> (&b)[FN]) {
  struct As { part_frag_a<T> x[FM]; };
  struct Bs { part_frag_b<T> x[FN]; };
  static_assert(sizeof(As) <= 64 && sizeof(Bs) <= 64, "a warp tile of at most 64 bytes of fragments per lane");
#ifdef EMU_PROFILE
  for (int n = 0; n < FM * FN; ++n) emu::prof::warp_op(emu::prof::MMA);
#endif
  As mine_a, all_a[32];
  Bs mine_b, all_b[32];
  for (int i = 0; i < FM; ++i) mine_a.x[i] = a[i];
  for (int j = 0; j < FN; ++j) mine_b.x[j] = b[j];
  emu::warp_allgather(mine_a, all_a);
  emu::warp_allgather(mine_b, all_b);
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int i = 0; i < FM; ++i)
    for (int j = 0; j < FN; ++j)
      for (int e = 0; e < 4; ++e) {
        const int row = part_frag_c_row(g, e), col = part_frag_c_col(t, e);
        float acc = c[i][j][e];
        for (int k = 0; k < 16; ++k) {
          // the lanes holding A(row, k) and B(k, col), and the elements that are those
          const int ka = (k & 1) + 2 * (row / 8) + 4 * (k / 8), kb = (k & 1) + 2 * (k / 8);
          acc += float(all_a[4 * (row % 8) + k % 8 / 2].x[i].x[ka]) * float(all_b[4 * col + k % 8 / 2].x[j].x[kb]);
        }
        c[i][j][e] = acc;
      }
}
#else
template <int FM, int FN, class T>
PART_DEV void part_mma_tile(float (&c)[FM][FN][4], const part_frag_a<T> (&a)[FM], const part_frag_b<T> (&b)[FN]) {
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j) part_mma(c[i][j], a[i], b[j]);
}
#endif

// float32: each lane fetches the A rows and B columns of its outputs by shuffles. The lane
// column `owner` holding k runs as a loop (not unrolled), so only eight shuffled values are
// in flight at a time: the register budget of the kernels around it stays small.
PART_DEV void part_mma(float c[4], const part_frag_a<float>& a, const part_frag_b<float>& b) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll 1
  for (int owner = 0; owner < 4; ++owner) {
#pragma unroll
    for (int hi = 0; hi < 2; ++hi)
#pragma unroll
      for (int odd = 0; odd < 2; ++odd) {  // k = 8 * hi + 2 * owner + odd
        const float a0 = __shfl_sync(0xffffffffu, a.x[4 * hi + odd], 4 * g + owner);
        const float a1 = __shfl_sync(0xffffffffu, a.x[4 * hi + 2 + odd], 4 * g + owner);
        const float b0 = __shfl_sync(0xffffffffu, b.x[2 * hi + odd], 4 * (2 * t) + owner);
        const float b1 = __shfl_sync(0xffffffffu, b.x[2 * hi + odd], 4 * (2 * t + 1) + owner);
        c[0] += a0 * b0;
        c[1] += a0 * b1;
        c[2] += a1 * b0;
        c[3] += a1 * b1;
      }
  }
}
