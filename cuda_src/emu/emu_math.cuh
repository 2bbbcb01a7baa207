// CUDA device math and bit intrinsics for the emulation layer.  The libm
// functions (sqrtf, expf, fmaf, ...) come from <math.h> in the global
// namespace; this file adds CUDA-only names.  Included by cuda_emu.cuh only.
#ifndef CUPYCONV_EMU_MATH_CUH
#define CUPYCONV_EMU_MATH_CUH

// ---------------------------------------------------------------------------
// min / max with CUDA's overload set (mixed signedness promotes to unsigned,
// mixed float/double to double; float versions follow fminf/fmaxf).
// ---------------------------------------------------------------------------
#define CUPYCONV_EMU_MINMAX(R, A, B)                                        \
  inline R min(A a, B b) { return static_cast<R>(a) < static_cast<R>(b) ? static_cast<R>(a) : static_cast<R>(b); } \
  inline R max(A a, B b) { return static_cast<R>(a) > static_cast<R>(b) ? static_cast<R>(a) : static_cast<R>(b); }
CUPYCONV_EMU_MINMAX(int, int, int)
CUPYCONV_EMU_MINMAX(unsigned int, unsigned int, unsigned int)
CUPYCONV_EMU_MINMAX(unsigned int, int, unsigned int)
CUPYCONV_EMU_MINMAX(unsigned int, unsigned int, int)
CUPYCONV_EMU_MINMAX(long, long, long)
CUPYCONV_EMU_MINMAX(unsigned long, unsigned long, unsigned long)
CUPYCONV_EMU_MINMAX(unsigned long, long, unsigned long)
CUPYCONV_EMU_MINMAX(unsigned long, unsigned long, long)
CUPYCONV_EMU_MINMAX(long long, long long, long long)
CUPYCONV_EMU_MINMAX(unsigned long long, unsigned long long, unsigned long long)
CUPYCONV_EMU_MINMAX(unsigned long long, long long, unsigned long long)
CUPYCONV_EMU_MINMAX(unsigned long long, unsigned long long, long long)
#undef CUPYCONV_EMU_MINMAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(float a, double b) { return fmin(a, b); }
inline double max(float a, double b) { return fmax(a, b); }
inline double min(double a, float b) { return fmin(a, b); }
inline double max(double a, float b) { return fmax(a, b); }
inline unsigned int umin(unsigned int a, unsigned int b) { return min(a, b); }
inline unsigned int umax(unsigned int a, unsigned int b) { return max(a, b); }
inline long long llmin(long long a, long long b) { return min(a, b); }
inline long long llmax(long long a, long long b) { return max(a, b); }
inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return min(a, b); }
inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return max(a, b); }

// ---------------------------------------------------------------------------
// Floating point intrinsics (round-to-nearest variants are the host ops).
// ---------------------------------------------------------------------------
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __powf(float a, float b) { return powf(a, b); }
inline void __sincosf(float x, float* s, float* c) { sincosf(x, s, c); }
inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : (x > 0.0f ? x : 0.0f); }

namespace cupyconv_emu {
namespace detail {

/// Float -> integer conversion with CUDA's saturation (NaN -> 0) instead of
/// C++ undefined behaviour on overflow.
template <class I>
inline I saturating_cast(double v) {
  if (v != v) return I(0);
  if (v <= static_cast<double>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (v >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

}  // namespace detail
}  // namespace cupyconv_emu

#define CUPYCONV_EMU_F2I(FROM, SUFFIX, TO, NAME)                                                  \
  inline TO NAME##_rz(FROM x) { return ::cupyconv_emu::detail::saturating_cast<TO>(std::trunc(x)); } \
  inline TO NAME##_rn(FROM x) { return ::cupyconv_emu::detail::saturating_cast<TO>(std::nearbyint(x)); } \
  inline TO NAME##_rd(FROM x) { return ::cupyconv_emu::detail::saturating_cast<TO>(std::floor(x)); } \
  inline TO NAME##_ru(FROM x) { return ::cupyconv_emu::detail::saturating_cast<TO>(std::ceil(x)); }
CUPYCONV_EMU_F2I(float, f, int, __float2int)
CUPYCONV_EMU_F2I(float, f, unsigned int, __float2uint)
CUPYCONV_EMU_F2I(float, f, long long, __float2ll)
CUPYCONV_EMU_F2I(float, f, unsigned long long, __float2ull)
CUPYCONV_EMU_F2I(double, d, int, __double2int)
CUPYCONV_EMU_F2I(double, d, unsigned int, __double2uint)
CUPYCONV_EMU_F2I(double, d, long long, __double2ll)
CUPYCONV_EMU_F2I(double, d, unsigned long long, __double2ull)
#undef CUPYCONV_EMU_F2I
inline float __int2float_rn(int x) { return static_cast<float>(x); }
inline float __uint2float_rn(unsigned int x) { return static_cast<float>(x); }
inline float __ll2float_rn(long long x) { return static_cast<float>(x); }
inline double __int2double_rn(int x) { return static_cast<double>(x); }
inline double __ll2double_rn(long long x) { return static_cast<double>(x); }
inline float __double2float_rn(double x) { return static_cast<float>(x); }

// Reinterpretation
inline int __float_as_int(float x) { return ::cupyconv_emu::detail::bit_cast<int>(x); }
inline unsigned int __float_as_uint(float x) { return ::cupyconv_emu::detail::bit_cast<unsigned int>(x); }
inline float __int_as_float(int x) { return ::cupyconv_emu::detail::bit_cast<float>(x); }
inline float __uint_as_float(unsigned int x) { return ::cupyconv_emu::detail::bit_cast<float>(x); }
inline long long __double_as_longlong(double x) { return ::cupyconv_emu::detail::bit_cast<long long>(x); }
inline double __longlong_as_double(long long x) { return ::cupyconv_emu::detail::bit_cast<double>(x); }

// ---------------------------------------------------------------------------
// Integer intrinsics
// ---------------------------------------------------------------------------
inline unsigned int __umulhi(unsigned int a, unsigned int b) {
  return static_cast<unsigned int>((static_cast<unsigned long long>(a) * b) >> 32);
}
inline int __mulhi(int a, int b) {
  return static_cast<int>((static_cast<long long>(a) * b) >> 32);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
inline long long __mul64hi(long long a, long long b) {
  return static_cast<long long>((static_cast<__int128>(a) * b) >> 64);
}
inline int __mul24(int a, int b) {
  const int a24 = static_cast<int>(static_cast<unsigned>(a) << 8) >> 8;  // sign-extend low 24 bits
  const int b24 = static_cast<int>(static_cast<unsigned>(b) << 8) >> 8;
  return static_cast<int>(static_cast<unsigned>(a24) * static_cast<unsigned>(b24));
}
inline unsigned int __umul24(unsigned int a, unsigned int b) {
  return (a & 0xffffffu) * (b & 0xffffffu);
}
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __clzll(long long x) {
  return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x));
}
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned int __brev(unsigned int x) {
  unsigned int r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline unsigned long long __brevll(unsigned long long x) {
  return (static_cast<unsigned long long>(__brev(static_cast<unsigned>(x))) << 32) |
         __brev(static_cast<unsigned>(x >> 32));
}
inline unsigned int __funnelshift_l(unsigned int lo, unsigned int hi, unsigned int shift) {
  const unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
  return static_cast<unsigned int>((v << (shift & 31u)) >> 32);
}
inline unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int shift) {
  const unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
  return static_cast<unsigned int>(v >> (shift & 31u));
}

// ---------------------------------------------------------------------------
// Memory access hints: plain loads/stores on the host.
// ---------------------------------------------------------------------------
#define CUPYCONV_EMU_LOAD(NAME) \
  template <class T>            \
  inline T NAME(const T* p) { return *p; }
CUPYCONV_EMU_LOAD(__ldg)
CUPYCONV_EMU_LOAD(__ldca)
CUPYCONV_EMU_LOAD(__ldcg)
CUPYCONV_EMU_LOAD(__ldcs)
CUPYCONV_EMU_LOAD(__ldlu)
CUPYCONV_EMU_LOAD(__ldcv)
#undef CUPYCONV_EMU_LOAD
#define CUPYCONV_EMU_STORE(NAME) \
  template <class T>             \
  inline void NAME(T* p, T v) { *p = v; }
CUPYCONV_EMU_STORE(__stwb)
CUPYCONV_EMU_STORE(__stcg)
CUPYCONV_EMU_STORE(__stcs)
CUPYCONV_EMU_STORE(__stwt)
#undef CUPYCONV_EMU_STORE

// ---------------------------------------------------------------------------
// Clocks: clock64() counts nanoseconds of the host's steady clock (monotonic, not the
// SM's cycles), so a kernel that times itself runs and reports plausible numbers.
// ---------------------------------------------------------------------------
inline long long clock64() {
  return static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    std::chrono::steady_clock::now().time_since_epoch())
                                    .count());
}

// Fences: every fiber switch is a full barrier on one OS thread.
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}

#endif  // CUPYCONV_EMU_MATH_CUH
