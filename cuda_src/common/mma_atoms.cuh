// cupyconv: warp-level tensor-core MMA atoms and ldmatrix, one API on both sides.
//
// Include "platform.cuh" first, then "common/mma_atoms.cuh".  A kernel names an
// atom and its fragment layout; it never spells PTX registers itself:
//
//   using Mma = cc::MmaTf32_m16n8k8;             // D(16x8) = A(16x8) * B(8x8) + C(16x8)
//   const int lane = threadIdx.x % 32;
//   Mma::FragA a; Mma::FragB b; Mma::FragC c;
//   for (int i = 0; i < Mma::kAElems; ++i) {     // lane's elements of A through the atom's map
//     const cc::MmaCoord p = Mma::a_coord(lane, i);
//     a[i] = cc::to_tf32(A[p.row * lda + p.col]);
//   }
//   ... b from Mma::b_coord, c from Mma::c_coord ...
//   Mma::mma(c, a, b, c);                        // all 32 lanes of the warp, converged
//   ... D[p.row * ldd + p.col] = c[i] with p = Mma::c_coord(lane, i) ...
//
// Atoms (sm_80+, `mma.sync.aligned`, matrices A row-major M x K, B column-major K x N):
//
//   atom               PTX                                              A           B           C/D
//   MmaF64_m8n8k4      mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64  1 double    1 double    2 double
//   MmaTf32_m16n8k8    mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32  4 x b32 (tf32)  2 x b32  4 float
//   MmaF16_m16n8k16    mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32   4 x f16x2 (8 halves)
//                                                                       2 x f16x2 (4 halves)  4 float
//   MmaBf16_m16n8k16   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 as f16, bf16x2 registers
//   MmaF64_m16n8k16    mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64  8 double  4 double  4 double
//                      (sm_90 only: DMMA.16x8x16, 8x the work of one m8n8k4; cc::kHasMmaF64K16)
//
// Each atom has kM, kN, kK; FragA / FragB / FragC (register arrays: kARegs, kBRegs,
// kCRegs registers of type ARegister, ...; kAElems, kBElems, kCElems matrix elements
// per lane) and the constexpr maps (host and device) from (lane, element index i)
// to (row, col) of its matrix: a_coord, b_coord, c_coord (c_coord also for D).
// With groupID g = lane >> 2 and threadID_in_group t = lane % 4 (PTX ISA, "Matrix
// fragments for mma.m8n8k4 with .f64", "... mma.m16n8k8", "... mma.m16n8k16 with
// floating point type"; the same as CUTLASS's cute/atom/mma_traits_sm80.hpp):
//
//   m8n8k4 f64     A a0 = (g, t)     B b0 = (t, g)     C/D c_i = (g, 2t + i), i = 0, 1
//   m16n8k8 tf32   A a_i = (g + 8 (i & 1), t + 4 (i >> 1)), i = 0..3
//                  B b_i = (t + 4 i, g), i = 0, 1
//                  C/D c_i = (g + 8 (i >> 1), 2t + (i & 1)), i = 0..3
//   m16n8k16 f16   A a_i = (g + 8 ((i >> 1) & 1), 2t + (i & 1) + 8 (i >> 2)), halves i = 0..7
//                  B b_i = (2t + (i & 1) + 8 (i >> 1), g), halves i = 0..3
//                  C/D as m16n8k8
//   m16n8k16 bf16  A, B, C/D as m16n8k16 f16 (PTX: one table for .f16 and .bf16)
//   m16n8k16 f64   A a_i = (g + 8 (i & 1), t + 4 (i >> 1)), i = 0..7
//                  B b_i = (t + 4 i, g), i = 0..3
//                  C/D as m16n8k8
//   (the f64 table is PTX's "Matrix fragments for mma.m16n8k16 with .f64", the same as
//   CUTLASS's cute/atom/mma_traits_sm90.hpp SM90_16x8x16_F64F64F64F64_TN)
//
// For the f16 and bf16 atoms element i lives in register i / 2, low 16 bits for even i
// (cc::frag_set_half / cc::frag_half for half, cc::frag_set_bf16 / cc::frag_bf16 for
// bfloat16).  Under the tf32 atom the operands are
// the cc::to_tf32 bits of a float: cvt.rna.tf32.f32, round to nearest with ties
// AWAY from zero to 10 mantissa bits, low 13 bits zero; +-Inf kept; NaN only has
// its low 13 bits cleared (ptxas lowers the cvt to exactly that bit arithmetic on
// sm_80 and sm_90, so a NaN whose payload lies only there becomes +-Inf).
// Accumulation: f64 in double; tf32, f16 and bf16 in float32 (the products of two
// tf32, f16 or bf16 operands are exact in float).  PTX does not specify the order or
// the internal rounding of the K-sum (an H200 adds c and all K products at once,
// truncated to 25 bits below the largest term, rounding toward zero; the
// emulator copies that, see docs/emulation.md): compare results with a
// tolerance of the accumulator's rounding error, not bit for bit.
//
// cc::MmaAtomFor<T>::type names the atom of a storage type (double, float under TF32,
// half); cc::round_tf32 is the float a tf32 operand holds and cc::operand_register the
// register of a staged element (double as is, float as its bits), so a kernel can stage
// tf32-rounded floats in shared memory once and read fragments as plain moves.
//
// ldmatrix (sm_75+): cc::ldmatrix<Num, Trans>(unsigned (&r)[Num], row_address)
// is `ldmatrix.sync.aligned.m8n8.x{Num}{.trans}.shared.b16`: Num 8x8 matrices of
// 16-bit elements from shared memory.  Lane l supplies the address of row
// LdmatrixM8n8::src_row(l) of matrix LdmatrixM8n8::src_matrix(l, Num) (16 bytes,
// 16-byte aligned; the hardware reads lanes 0 .. 8 Num - 1 only, and on sm_75
// every lane must hold a valid address, which src_matrix's wrap-around gives).
// Register m receives from matrix m the two halves LdmatrixM8n8::dst(l, j, Trans),
// j = 0 (low) and 1 (high): (l / 4, 2 (l % 4) + j), transposed with .trans.  So an
// .x4 of a 16x16 row-major f16 tile (matrix m = rows 8 (m & 1) .., columns 8 (m >> 1) ..)
// is MmaF16_m16n8k16's FragA, and an .x2.trans of a 16x8 row-major B tile (matrix m
// = rows 8 m ..) its FragB.
//
// ldmatrix of 32-bit elements (TF32, as CUTLASS loads its operands): ldmatrix moves bytes,
// so a 16-byte row is 4 floats and register m of lane l is the float (l / 4, l % 4) of
// matrix m (its halves j = 0, 1 are the float's low and high 16 bits).  An .x4 of a 16x8
// row-major float tile (matrix m = rows 8 (m & 1) .., columns 4 (m >> 1) ..) is therefore
// MmaTf32_m16n8k8's FragA, and an .x2 of an 8x8 tile stored n-major ([n][k], matrix m =
// columns 4 m ..) its FragB.  .trans transposes 16-bit halves, not 32-bit elements: it
// does not serve 32-bit data (a TF32 operand stored k-major needs scalar loads).
//
// All of these are warp collectives: every lane of a full warp must call the same
// instruction (`.sync.aligned`), converged.  Under NVRTC they are inline PTX
// (HMMA / DMMA / LDSM in SASS).  Below sm_80 cc::kHasMma is false and using an
// MMA atom is a compile-time error (a static_assert in mma(), only if it is
// called: the maps and cc::to_tf32 -- then plain bit arithmetic -- still work);
// below sm_75 the same holds for cc::ldmatrix (cc::kHasLdmatrix).  Under the CPU
// emulator (cuda_src/emu/emu_mma.cuh, docs/emulation.md "Tensor-core atoms") each
// is an exact warp collective of the 32 fibers: a missing lane, a partial warp or
// lanes at different call sites are an EmulationError naming the call site.
//
// Header-only, no standard library (NVRTC has none).
#pragma once
#include "types.cuh"

#if !defined(CUPYCONV_DEVICE_CUDA) && !defined(CUPYCONV_DEVICE_EMULATED)
#error "include platform.cuh before common/mma_atoms.cuh"
#endif

#if defined(CUPYCONV_DEVICE_EMULATED) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800)
#define CUPYCONV_HAS_MMA 1
#endif
#if defined(CUPYCONV_DEVICE_EMULATED) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750)
#define CUPYCONV_HAS_LDMATRIX 1
#endif
#if defined(CUPYCONV_DEVICE_EMULATED) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
#define CUPYCONV_HAS_MMA_F64_K16 1
#endif

// Under the emulator every collective takes its call site (for error messages)
// as defaulted last arguments, filled in at the caller's line (a builtin that is
// the whole default argument is evaluated at the call; wrapped in a braced
// initializer it would name this header).
#if defined(CUPYCONV_DEVICE_EMULATED)
#define CUPYCONV_MMA_SITE_PARAM \
  , const char* cupyconv_file_ = __builtin_FILE(), int cupyconv_line_ = __builtin_LINE()
#define CUPYCONV_MMA_SITE ::cupyconv_emu::detail::Site{cupyconv_file_, cupyconv_line_}
#else
#define CUPYCONV_MMA_SITE_PARAM
#endif

namespace cc {

#if defined(CUPYCONV_HAS_MMA)
constexpr bool kHasMma = true;       ///< the MMA atoms can be used here
#else
constexpr bool kHasMma = false;
#endif
#if defined(CUPYCONV_HAS_LDMATRIX)
constexpr bool kHasLdmatrix = true;  ///< cc::ldmatrix can be used here
#else
constexpr bool kHasLdmatrix = false;
#endif
#if defined(CUPYCONV_HAS_MMA_F64_K16)
constexpr bool kHasMmaF64K16 = true;  ///< cc::MmaF64_m16n8k16 can be used here (sm_90+)
#else
constexpr bool kHasMmaF64K16 = false;
#endif

/// (row, column) of a matrix element.
struct MmaCoord {
  int row;  ///< row index
  int col;  ///< column index
};

// ---------------------------------------------------------------------------
// Operand helpers
// ---------------------------------------------------------------------------

/// cvt.rna.tf32.f32: the tf32 bits of `x` (see the top of this file).
CC_DEVICE unsigned to_tf32(float x) {
#if defined(CUPYCONV_DEVICE_EMULATED)
  return ::cupyconv_emu::detail::tf32_rna_bits(x);
#elif defined(CUPYCONV_HAS_MMA)
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
#else
  unsigned u = __float_as_uint(x);   // the same bit arithmetic ptxas emits for the cvt
  if ((u & 0x7fffffffu) < 0x7f800000u) u += 0x1000u;
  return u & 0xffffe000u;
#endif
}

/// The float a tf32 register holds.
CC_DEVICE float tf32_to_float(unsigned bits) {
#if defined(CUPYCONV_DEVICE_EMULATED)
  return ::cupyconv_emu::detail::bit_cast<float>(bits);
#else
  return __uint_as_float(bits);
#endif
}

/// An f16x2 register: `lo` in bits 0-15, `hi` in bits 16-31.
CC_DEVICE unsigned pack_half2(half lo, half hi) {
  return static_cast<unsigned>(lo.bits) | (static_cast<unsigned>(hi.bits) << 16);
}

/// Element i of an f16x2 register array (register i / 2, low half for even i).
template <int N>
CC_DEVICE half frag_half(const unsigned (&regs)[N], int i) {
  half h;
  h.bits = static_cast<unsigned short>((i & 1) ? (regs[i >> 1] >> 16) : (regs[i >> 1] & 0xffffu));
  return h;
}

/// Sets element i of an f16x2 register array.
template <int N>
CC_DEVICE void frag_set_half(unsigned (&regs)[N], int i, half h) {
  const unsigned shift = (i & 1) ? 16u : 0u;
  regs[i >> 1] = (regs[i >> 1] & ~(0xffffu << shift)) | (static_cast<unsigned>(h.bits) << shift);
}

/// Element i of a bf16x2 register array (the same packing as f16x2).
template <int N>
CC_DEVICE bfloat16 frag_bf16(const unsigned (&regs)[N], int i) {
  bfloat16 h;
  h.bits = frag_half(regs, i).bits;
  return h;
}

/// Sets element i of a bf16x2 register array.
template <int N>
CC_DEVICE void frag_set_bf16(unsigned (&regs)[N], int i, bfloat16 v) {
  half h;
  h.bits = v.bits;
  frag_set_half(regs, i, h);
}

// ---------------------------------------------------------------------------
// MMA atoms
// ---------------------------------------------------------------------------

/// The C/D map of every m16n8 atom: c_i = (g + 8 (i >> 1), 2t + (i & 1)), i < 4.
struct MmaMapC16x8 {
  static CC_CONSTEXPR MmaCoord c_coord(int lane, int i) {
    return MmaCoord{(lane >> 2) + 8 * (i >> 1), 2 * (lane & 3) + (i & 1)};
  }
};

/// The A and B maps of the atoms with 32-bit-or-wider elements on m16n8: a_i = (g + 8 (i & 1),
/// t + 4 (i >> 1)) and b_i = (t + 4 i, g) (MmaTf32_m16n8k8: i < 4, 2; MmaF64_m16n8k16: 8, 4).
struct MmaMapsAB16x8Wide {
  static CC_CONSTEXPR MmaCoord a_coord(int lane, int i) {
    return MmaCoord{(lane >> 2) + 8 * (i & 1), (lane & 3) + 4 * (i >> 1)};
  }
  static CC_CONSTEXPR MmaCoord b_coord(int lane, int i) {
    return MmaCoord{(lane & 3) + 4 * i, lane >> 2};
  }
};

/// D(8x8) = A(8x4) * B(4x8) + C(8x8) in double: mma.sync.aligned.m8n8k4.row.col.f64.
struct MmaF64_m8n8k4 {
  static constexpr int kM = 8, kN = 8, kK = 4;
  using AElement = double;   ///< matrix element types
  using BElement = double;
  using CElement = double;
  using ARegister = double;  ///< register types
  using BRegister = double;
  using CRegister = double;
  static constexpr int kARegs = 1, kBRegs = 1, kCRegs = 2;   ///< registers per lane
  static constexpr int kAElems = 1, kBElems = 1, kCElems = 2;  ///< matrix elements per lane
  using FragA = double[1];
  using FragB = double[1];
  using FragC = double[2];  ///< also the type of D

  static CC_CONSTEXPR MmaCoord a_coord(int lane, int /*i*/) { return MmaCoord{lane >> 2, lane & 3}; }
  static CC_CONSTEXPR MmaCoord b_coord(int lane, int /*i*/) { return MmaCoord{lane & 3, lane >> 2}; }
  static CC_CONSTEXPR MmaCoord c_coord(int lane, int i) {
    return MmaCoord{lane >> 2, 2 * (lane & 3) + i};
  }

  /// d = a * b + c over the warp (d may alias c).
  template <int kDeferred = 0>
  static CC_DEVICE void mma(FragC& d, const FragA& a, const FragB& b,
                            const FragC& c CUPYCONV_MMA_SITE_PARAM) {
#if defined(CUPYCONV_DEVICE_EMULATED)
    ::cupyconv_emu::detail::mma_m8n8k4_f64(CUPYCONV_MMA_SITE, d, a, b, c);
#elif defined(CUPYCONV_HAS_MMA)
    asm volatile(
        "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%4, %5};\n"
        : "=d"(d[0]), "=d"(d[1])
        : "d"(a[0]), "d"(b[0]), "d"(c[0]), "d"(c[1]));
#else
    static_assert(kDeferred != 0, "cc::MmaF64_m8n8k4 needs sm_80 or newer (test cc::kHasMma)");
#endif
  }
};

/// D(16x8) = A(16x8) * B(8x8) + C(16x8), tf32 operands, float accumulation:
/// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32.  Fill FragA / FragB with
/// cc::to_tf32 of the floats.
struct MmaTf32_m16n8k8 : MmaMapC16x8, MmaMapsAB16x8Wide {
  static constexpr int kM = 16, kN = 8, kK = 8;
  using AElement = float;      ///< as tf32 bits (cc::to_tf32)
  using BElement = float;
  using CElement = float;
  using ARegister = unsigned;  ///< .b32 holding a tf32
  using BRegister = unsigned;
  using CRegister = float;
  static constexpr int kARegs = 4, kBRegs = 2, kCRegs = 4;
  static constexpr int kAElems = 4, kBElems = 2, kCElems = 4;
  using FragA = unsigned[4];
  using FragB = unsigned[2];
  using FragC = float[4];

  /// d = a * b + c over the warp (d may alias c).
  template <int kDeferred = 0>
  static CC_DEVICE void mma(FragC& d, const FragA& a, const FragB& b,
                            const FragC& c CUPYCONV_MMA_SITE_PARAM) {
#if defined(CUPYCONV_DEVICE_EMULATED)
    ::cupyconv_emu::detail::mma_m16n8k8_tf32(CUPYCONV_MMA_SITE, d, a, b, c);
#elif defined(CUPYCONV_HAS_MMA)
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
    static_assert(kDeferred != 0, "cc::MmaTf32_m16n8k8 needs sm_80 or newer (test cc::kHasMma)");
#endif
  }
};

/// D(16x8) = A(16x16) * B(16x8) + C(16x8), f16 operands, float accumulation:
/// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32.  Elements are halves
/// packed two per register (cc::frag_set_half / cc::frag_half).
struct MmaF16_m16n8k16 : MmaMapC16x8 {
  static constexpr int kM = 16, kN = 8, kK = 16;
  using AElement = half;
  using BElement = half;
  using CElement = float;
  using ARegister = unsigned;  ///< .f16x2
  using BRegister = unsigned;  ///< .f16x2
  using CRegister = float;
  static constexpr int kARegs = 4, kBRegs = 2, kCRegs = 4;
  static constexpr int kAElems = 8, kBElems = 4, kCElems = 4;
  using FragA = unsigned[4];
  using FragB = unsigned[2];
  using FragC = float[4];

  static CC_CONSTEXPR MmaCoord a_coord(int lane, int i) {
    return MmaCoord{(lane >> 2) + 8 * ((i >> 1) & 1), 2 * (lane & 3) + (i & 1) + 8 * (i >> 2)};
  }
  static CC_CONSTEXPR MmaCoord b_coord(int lane, int i) {
    return MmaCoord{2 * (lane & 3) + (i & 1) + 8 * (i >> 1), lane >> 2};
  }
  /// d = a * b + c over the warp (d may alias c).
  template <int kDeferred = 0>
  static CC_DEVICE void mma(FragC& d, const FragA& a, const FragB& b,
                            const FragC& c CUPYCONV_MMA_SITE_PARAM) {
#if defined(CUPYCONV_DEVICE_EMULATED)
    ::cupyconv_emu::detail::mma_m16n8k16_f16(CUPYCONV_MMA_SITE, d, a, b, c);
#elif defined(CUPYCONV_HAS_MMA)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
    static_assert(kDeferred != 0, "cc::MmaF16_m16n8k16 needs sm_80 or newer (test cc::kHasMma)");
#endif
  }
};

/// D(16x8) = A(16x16) * B(16x8) + C(16x8), bf16 operands, float accumulation:
/// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (sm_80+).  The fragment layout
/// is MmaF16_m16n8k16's; elements are bfloat16 packed two per register
/// (cc::frag_set_bf16 / cc::frag_bf16).
struct MmaBf16_m16n8k16 : MmaF16_m16n8k16 {
  using AElement = bfloat16;
  using BElement = bfloat16;

  /// d = a * b + c over the warp (d may alias c).
  template <int kDeferred = 0>
  static CC_DEVICE void mma(FragC& d, const FragA& a, const FragB& b,
                            const FragC& c CUPYCONV_MMA_SITE_PARAM) {
#if defined(CUPYCONV_DEVICE_EMULATED)
    ::cupyconv_emu::detail::mma_m16n8k16_bf16(CUPYCONV_MMA_SITE, d, a, b, c);
#elif defined(CUPYCONV_HAS_MMA)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
    static_assert(kDeferred != 0, "cc::MmaBf16_m16n8k16 needs sm_80 or newer (test cc::kHasMma)");
#endif
  }
};

/// D(16x8) = A(16x16) * B(16x8) + C(16x8) in double:
/// mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 (sm_90 only: DMMA.16x8x16 in SASS;
/// test cc::kHasMmaF64K16, and use MmaF64_m8n8k4 on sm_80).
struct MmaF64_m16n8k16 : MmaMapC16x8, MmaMapsAB16x8Wide {
  static constexpr int kM = 16, kN = 8, kK = 16;
  using AElement = double;
  using BElement = double;
  using CElement = double;
  using ARegister = double;
  using BRegister = double;
  using CRegister = double;
  static constexpr int kARegs = 8, kBRegs = 4, kCRegs = 4;
  static constexpr int kAElems = 8, kBElems = 4, kCElems = 4;
  using FragA = double[8];
  using FragB = double[4];
  using FragC = double[4];

  /// d = a * b + c over the warp (d may alias c).
  template <int kDeferred = 0>
  static CC_DEVICE void mma(FragC& d, const FragA& a, const FragB& b,
                            const FragC& c CUPYCONV_MMA_SITE_PARAM) {
#if defined(CUPYCONV_DEVICE_EMULATED)
    ::cupyconv_emu::detail::mma_m16n8k16_f64(CUPYCONV_MMA_SITE, d, a, b, c);
#elif defined(CUPYCONV_HAS_MMA_F64_K16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7, %8, %9, %10, %11}, {%12, %13, %14, %15}, {%16, %17, %18, %19};\n"
        : "=d"(d[0]), "=d"(d[1]), "=d"(d[2]), "=d"(d[3])
        : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]),
          "d"(a[7]), "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]),
          "d"(c[0]), "d"(c[1]), "d"(c[2]), "d"(c[3]));
#else
    static_assert(kDeferred != 0,
                  "cc::MmaF64_m16n8k16 needs sm_90 or newer (test cc::kHasMmaF64K16)");
#endif
  }
};

/// The tensor-core atom of a storage type: double -> MmaF64_m8n8k4 (DMMA), float ->
/// MmaTf32_m16n8k8 (the TF32 opt-in), half -> MmaF16_m16n8k16, bfloat16 ->
/// MmaBf16_m16n8k16; kDefined false for the others (whose `type` is a placeholder a
/// kernel must not call).
template <typename T> struct MmaAtomFor {
  using type = MmaF64_m8n8k4;
  static constexpr bool kDefined = false;
};
template <> struct MmaAtomFor<double> {
  using type = MmaF64_m8n8k4;
  static constexpr bool kDefined = true;
};
template <> struct MmaAtomFor<float> {
  using type = MmaTf32_m16n8k8;
  static constexpr bool kDefined = true;
};
template <> struct MmaAtomFor<half> {
  using type = MmaF16_m16n8k16;
  static constexpr bool kDefined = true;
};
template <> struct MmaAtomFor<bfloat16> {
  using type = MmaBf16_m16n8k16;
  static constexpr bool kDefined = true;
};

/// The register an element staged for an atom becomes: a double as it is, a float
/// (already tf32-rounded, cc::round_tf32) as its .b32 bits.
CC_DEVICE double operand_register(double v) { return v; }
CC_DEVICE unsigned operand_register(float v) { return __float_as_uint(v); }

/// `x` rounded to tf32 as a float (cvt.rna.tf32.f32; the low 13 bits zero), the value a
/// kernel stages once in shared memory so every fragment read is a plain move.
CC_DEVICE float round_tf32(float x) { return tf32_to_float(to_tf32(x)); }

// ---------------------------------------------------------------------------
// ldmatrix
// ---------------------------------------------------------------------------

/// Layout of ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16.
struct LdmatrixM8n8 {
  static constexpr int kRows = 8, kCols = 8;  ///< each matrix: 8 rows of 8 16-bit elements
  /// Matrix whose row address lane `lane` supplies in an .x{num} load (lanes past
  /// 8 num repeat the lower lanes' rows, valid addresses as sm_75 requires).
  static CC_CONSTEXPR int src_matrix(int lane, int num) { return (lane >> 3) % num; }
  /// Row (0..7) whose address lane `lane` supplies.
  static CC_CONSTEXPR int src_row(int lane) { return lane & 7; }
  /// (row, col) in each matrix of half j (0 = low, 1 = high) of the register lane `lane` receives.
  static CC_CONSTEXPR MmaCoord dst(int lane, int j, bool trans) {
    return trans ? MmaCoord{2 * (lane & 3) + j, lane >> 2} : MmaCoord{lane >> 2, 2 * (lane & 3) + j};
  }
};

#if defined(CUPYCONV_DEVICE_CUDA) && defined(CUPYCONV_HAS_LDMATRIX)
/// 32-bit shared-state-space address of a generic pointer to shared memory.
CC_DEVICE unsigned mma_shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
#endif

/// ldmatrix.sync.aligned.m8n8.x{Num}{.trans}.shared.b16 r, [row_address] (see the top of the file).
template <int Num, bool Trans = false>
CC_DEVICE void ldmatrix(unsigned (&r)[Num], const void* row_address CUPYCONV_MMA_SITE_PARAM) {
  static_assert(Num == 1 || Num == 2 || Num == 4, "ldmatrix loads 1, 2 or 4 matrices");
#if defined(CUPYCONV_DEVICE_EMULATED)
  ::cupyconv_emu::detail::ldmatrix_m8n8(CUPYCONV_MMA_SITE, r, Num, Trans, row_address);
#elif defined(CUPYCONV_HAS_LDMATRIX)
  const unsigned addr = mma_shared_address(row_address);
  if constexpr (Num == 1 && !Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0]) : "r"(addr) : "memory");
  } else if constexpr (Num == 1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0]) : "r"(addr) : "memory");
  } else if constexpr (Num == 2 && !Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(addr) : "memory");
  } else if constexpr (Num == 2) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(addr) : "memory");
  } else if constexpr (!Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
  }
#else
  static_assert(Num == 0, "cc::ldmatrix needs sm_75 or newer (test cc::kHasLdmatrix)");
#endif
}

}  // namespace cc
