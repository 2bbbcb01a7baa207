// cupyconv: element types, accumulator traits and scalar helpers.
//
// Every kernel is templated on a storage element `T`, an accumulator `Acc`
// (`AccumType<T>::type` by default) and an index type `Index` (`int` or
// `long long`).  Complex numbers are a plain two-member struct so that the
// layout equals numpy's complex64/complex128 and NVRTC needs no std headers.
// Half storage (`cc::half`, IEEE binary16 bits) accumulates in float; its
// conversions are single PTX instructions, so no cuda_fp16.h is needed.
// bfloat16 storage (`cc::bfloat16`, the top 16 bits of a binary32, the layout of
// ml_dtypes.bfloat16) accumulates in float too; its conversions are integer bit
// arithmetic, the same on every arch and in the emulator (no cuda_bf16.h).
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define CC_DEVICE __device__ __forceinline__
#define CC_CONSTEXPR __host__ __device__ constexpr
#else
#define CC_DEVICE inline
#define CC_CONSTEXPR constexpr
#endif

namespace cc {

// ---------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------

/// Complex number with numpy's memory layout (real part first).
template <typename Real>
struct alignas(2 * sizeof(Real)) complex {
  Real re;  ///< real part
  Real im;  ///< imaginary part
};

template <typename Real>
CC_DEVICE complex<Real> operator+(complex<Real> a, complex<Real> b) {
  return complex<Real>{a.re + b.re, a.im + b.im};
}
template <typename Real>
CC_DEVICE complex<Real> operator-(complex<Real> a, complex<Real> b) {
  return complex<Real>{a.re - b.re, a.im - b.im};
}
template <typename Real>
CC_DEVICE complex<Real> operator*(complex<Real> a, complex<Real> b) {
  return complex<Real>{a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
template <typename Real>
CC_DEVICE complex<Real>& operator+=(complex<Real>& a, complex<Real> b) {
  a.re += b.re;
  a.im += b.im;
  return a;
}

/// `a * b + c`, exact for the integer types (wrapping as the GPU does).
template <typename T>
CC_DEVICE T fma(T a, T b, T c) { return a * b + c; }

/// `a * b + c` with ONE rounding (IEEE fusedMultiplyAdd) on both sides:
/// `__fmaf_rn` / `__fma_rn` (FFMA / DFMA) on the device, `std::fma` under the
/// CPU emulator, so emulated float and double results equal the GPU's bit for
/// bit.  (A plain `a * b + c` is contracted to FFMA by NVRTC but rounds twice
/// on an x86 host.)
CC_DEVICE float fma(float a, float b, float c) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
CC_DEVICE double fma(double a, double b, double c) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

/// Complex `a * b + c` as four real fused multiply-adds, the same rounding
/// sequence on both sides: re = fma(-a.im, b.im, fma(a.re, b.re, c.re)),
/// im = fma(a.im, b.re, fma(a.re, b.im, c.im)).
template <typename Real>
CC_DEVICE complex<Real> fma(complex<Real> a, complex<Real> b, complex<Real> c) {
  complex<Real> r;
  r.re = fma(-a.im, b.im, fma(a.re, b.re, c.re));
  r.im = fma(a.im, b.re, fma(a.re, b.im, c.im));
  return r;
}

/// IEEE binary16 storage with numpy float16's layout; arithmetic happens in float.
struct alignas(2) half {
  unsigned short bits;  ///< the binary16 bit pattern
};

/// binary16 -> float (exact).
CC_DEVICE float half_to_float(half h) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
#else
  return __half2float(__ushort_as_half(h.bits));
#endif
}

/// float -> binary16, round to nearest even (overflow gives +-inf).
CC_DEVICE half float_to_half(float f) {
  half h;
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
#else
  h.bits = __half_as_ushort(__float2half_rn(f));
#endif
  return h;
}

/// bfloat16 storage with ml_dtypes.bfloat16's layout (the high half of a binary32);
/// arithmetic happens in float.
struct alignas(2) bfloat16 {
  unsigned short bits;  ///< the bfloat16 bit pattern
};

/// bfloat16 -> float (exact: the bits are the float's high half).
CC_DEVICE float bfloat16_to_float(bfloat16 h) {
  const unsigned u = static_cast<unsigned>(h.bits) << 16;
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

/// float -> bfloat16, round to nearest even (overflow gives +-inf; a NaN stays a quiet
/// NaN of the same sign), as ml_dtypes and cvt.rn.bf16.f32 round.  Integer bit arithmetic,
/// so every arch (also sm_75, which has no bf16 cvt) and the emulator round alike.
CC_DEVICE bfloat16 float_to_bfloat16(float f) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  unsigned u = __float_as_uint(f);
#else
  unsigned u;
  std::memcpy(&u, &f, sizeof(u));
#endif
  bfloat16 h;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    h.bits = static_cast<unsigned short>((u >> 16) | 0x0040u);  // NaN: quiet, sign kept
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);                            // ties to even; carries to inf
    h.bits = static_cast<unsigned short>(u >> 16);
  }
  return h;
}

/// Accumulator type of a storage type: float for half and bfloat16, identity otherwise.
template <typename T> struct AccumType { using type = T; };
template <> struct AccumType<half> { using type = float; };
template <> struct AccumType<bfloat16> { using type = float; };

/// Conversion between storage and accumulator types.
template <typename Acc, typename T>
CC_DEVICE Acc to_accum(T v) { return static_cast<Acc>(v); }
template <typename T, typename Acc>
CC_DEVICE T from_accum(Acc v) { return static_cast<T>(v); }
template <>
CC_DEVICE float to_accum<float, half>(half v) { return half_to_float(v); }
template <>
CC_DEVICE half from_accum<half, float>(float v) { return float_to_half(v); }
template <>
CC_DEVICE float to_accum<float, bfloat16>(bfloat16 v) { return bfloat16_to_float(v); }
template <>
CC_DEVICE bfloat16 from_accum<bfloat16, float>(float v) { return float_to_bfloat16(v); }

/// Builds a scalar of type `T` from the (re, im) double pair of the params.
template <typename T>
struct ScalarFrom {
  static CC_DEVICE T make(double re, double /*im*/) { return static_cast<T>(re); }
};
template <>
struct ScalarFrom<half> {
  static CC_DEVICE half make(double re, double /*im*/) {
    return float_to_half(static_cast<float>(re));
  }
};
template <>
struct ScalarFrom<bfloat16> {
  static CC_DEVICE bfloat16 make(double re, double /*im*/) {
    return float_to_bfloat16(static_cast<float>(re));
  }
};
template <typename Real>
struct ScalarFrom<complex<Real>> {
  static CC_DEVICE complex<Real> make(double re, double im) {
    return complex<Real>{static_cast<Real>(re), static_cast<Real>(im)};
  }
};
template <typename T>
CC_DEVICE T make_scalar(double re, double im) { return ScalarFrom<T>::make(re, im); }

/// Additive identity.
template <typename T>
CC_DEVICE T zero() { return make_scalar<T>(0.0, 0.0); }

/// `type` is X when B, else Y (std::conditional; NVRTC has no standard library).
template <bool B, typename X, typename Y> struct Conditional { using type = X; };
template <typename X, typename Y> struct Conditional<false, X, Y> { using type = Y; };

/// True for the two supported index types.
template <typename Index> struct IsIndexType { static constexpr bool value = false; };
template <> struct IsIndexType<int> { static constexpr bool value = true; };
template <> struct IsIndexType<long long> { static constexpr bool value = true; };

}  // namespace cc
