// CUDA built-in types for the emulation layer: uint3, dim3, vector types and
// a minimal __half.  Included by cuda_emu.cuh only.
#ifndef CUPYCONV_EMU_TYPES_CUH
#define CUPYCONV_EMU_TYPES_CUH

/// Three unsigned components, the type of threadIdx and blockIdx.
struct uint3 {
  unsigned int x;  ///< first component
  unsigned int y;  ///< second component
  unsigned int z;  ///< third component
};

/// Launch dimensions; unspecified components default to 1 as in CUDA.
struct dim3 {
  unsigned int x;  ///< first component
  unsigned int y;  ///< second component
  unsigned int z;  ///< third component
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}  // NOLINT: implicit as in CUDA
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

// CUDA vector types with the alignment of the real ones, plus make_* helpers.
#define CUPYCONV_EMU_VEC2(T, N, A)                          \
  struct alignas(A) N {                                     \
    T x; /* first component */                              \
    T y; /* second component */                             \
  };                                                        \
  inline N make_##N(T x, T y) { return N{x, y}; }
#define CUPYCONV_EMU_VEC3(T, N)                             \
  struct N {                                                \
    T x; /* first component */                              \
    T y; /* second component */                             \
    T z; /* third component */                              \
  };                                                        \
  inline N make_##N(T x, T y, T z) { return N{x, y, z}; }
#define CUPYCONV_EMU_VEC4(T, N, A)                          \
  struct alignas(A) N {                                     \
    T x; /* first component */                              \
    T y; /* second component */                             \
    T z; /* third component */                              \
    T w; /* fourth component */                             \
  };                                                        \
  inline N make_##N(T x, T y, T z, T w) { return N{x, y, z, w}; }

CUPYCONV_EMU_VEC2(int, int2, 8)
CUPYCONV_EMU_VEC3(int, int3)
CUPYCONV_EMU_VEC4(int, int4, 16)
CUPYCONV_EMU_VEC2(unsigned int, uint2, 8)
CUPYCONV_EMU_VEC4(unsigned int, uint4, 16)
CUPYCONV_EMU_VEC2(float, float2, 8)
CUPYCONV_EMU_VEC3(float, float3)
CUPYCONV_EMU_VEC4(float, float4, 16)
CUPYCONV_EMU_VEC2(double, double2, 16)
CUPYCONV_EMU_VEC2(long long, longlong2, 16)
inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) {
  return uint3{x, y, z};
}
#undef CUPYCONV_EMU_VEC2
#undef CUPYCONV_EMU_VEC3
#undef CUPYCONV_EMU_VEC4

namespace cupyconv_emu {
namespace detail {

/// Bit copy between equally sized trivially copyable types.
template <class To, class From>
inline To bit_cast(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast needs equal sizes");
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
}

/// IEEE binary32 -> binary16 bits, round to nearest even (numpy-compatible,
/// including NaN payload handling).
inline unsigned short float_to_half_bits(float f) {
  const std::uint32_t x = bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or NaN
    if (ax == 0x7f800000u) return static_cast<unsigned short>(sign | 0x7c00u);
    std::uint32_t h = 0x7c00u + ((ax & 0x007fffffu) >> 13);
    if (h == 0x7c00u) ++h;  // keep it a NaN
    return static_cast<unsigned short>(sign | h);
  }
  if (ax >= 0x477ff000u) return static_cast<unsigned short>(sign | 0x7c00u);  // >= 65520: inf
  if (ax < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    if (ax <= 0x33000000u) return static_cast<unsigned short>(sign);  // <= 2^-25 rounds to 0
    const std::uint32_t mant = (ax & 0x007fffffu) | 0x00800000u;
    const std::uint32_t shift = 126u - (ax >> 23);
    std::uint32_t r = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
    return static_cast<unsigned short>(sign | r);
  }
  std::uint32_t r = (ax - 0x38000000u) >> 13;  // rebias exponent 127 -> 15
  const std::uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // carry may reach inf: correct
  return static_cast<unsigned short>(sign | r);
}

/// IEEE binary16 bits -> binary32 (exact).
inline float half_bits_to_float(unsigned short h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  const std::uint32_t m = h & 0x3ffu;
  if (e == 0) {
    const float mag = static_cast<float>(m) * 5.9604644775390625e-08f;  // m * 2^-24
    return sign ? -mag : mag;
  }
  if (e == 31) return bit_cast<float>(sign | 0x7f800000u | (m << 13));
  return bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
}

}  // namespace detail
}  // namespace cupyconv_emu

/// Minimal IEEE binary16 with numpy float16's bit layout.  Arithmetic goes
/// through float (implicit conversions), which matches kernels that store
/// half and accumulate in float.
struct __half {
  unsigned short __x;  ///< raw binary16 bits
  __half() = default;
  __half(float f) : __x(::cupyconv_emu::detail::float_to_half_bits(f)) {}  // NOLINT
  __half(double d) : __half(static_cast<float>(d)) {}                      // NOLINT
  operator float() const { return ::cupyconv_emu::detail::half_bits_to_float(__x); }
};
typedef __half half;

inline __half __ushort_as_half(unsigned short bits) {
  __half h;
  h.__x = bits;
  return h;
}
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return static_cast<float>(h); }
inline __half __hadd(__half a, __half b) { return __half(float(a) + float(b)); }
inline __half __hsub(__half a, __half b) { return __half(float(a) - float(b)); }
inline __half __hmul(__half a, __half b) { return __half(float(a) * float(b)); }
inline __half __hfma(__half a, __half b, __half c) {
  return __half(std::fma(float(a), float(b), float(c)));
}

#endif  // CUPYCONV_EMU_TYPES_CUH
