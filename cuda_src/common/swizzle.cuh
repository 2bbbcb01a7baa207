// cupyconv: XOR-swizzled shared-memory layouts (CuTe's Swizzle<B, M, S>), one API on both
// sides (NVRTC and the CPU emulator).
//
// Include "platform.cuh" first, then "common/swizzle.cuh".  A swizzle maps a linear offset
// (in elements, or in any unit the caller picks) to the offset where the element is stored:
//
//   apply(o) = o ^ ((o & kYMask) >> S),   kYMask = (2^B - 1) << (M + S)
//
// i.e. the B bits of `o` starting at bit M + S (the "row" bits) are XORed into the B bits
// starting at bit M (the "column of 2^M-element units" bits); the low M bits (one unit,
// e.g. 16 bytes) never move, so a 16-byte cp.async or ldmatrix row stays contiguous.
// apply is an involution (apply(apply(o)) == o) and a permutation of every aligned block
// of 2^(M + S + B) offsets.  With S >= B the row bits and the column bits do not overlap.
//
// The layouts of the tensor-core tiles (rows of 128 bytes, 16-byte units):
//
//   element         row of 128 bytes     swizzle            unit = 16 bytes
//   16-bit (f16,    64 elements          Swizzle<3, 3, 3>   8 elements
//   bf16)
//   32-bit (TF32)   32 elements          Swizzle<3, 2, 3>   4 elements
//   64-bit (f64)    16 elements          Swizzle<3, 1, 3>   2 elements (ldmatrix-style reads)
//                                        Swizzle<2, 2, 2>   LDS.64 fragment reads of the
//                                                           m16n8k16 / m8n8k4 f64 atoms
//
// (cc::Swizzle128B<Bytes> names the first three.)  For the first three, unit u of row r is
// stored at unit u ^ (r % 8): the 8 rows an ldmatrix matrix (or a quarter-warp of 16-byte
// cp.async writes of one column) touches land in 8 different 16-byte bank groups, and the
// 8 units of one row stay a permutation of the row (a quarter-warp writing one row is
// conflict-free too).  The host-side model of the same arithmetic, with a count of the
// shared-memory wavefronts a warp access takes, is cupyconv/_kernels/smem_layout.py;
// tests/emulation/test_emu_swizzle.py proves the layouts above conflict-free for the
// accesses the tiles make, and that this header and the model agree.
//
// Header-only, no standard library (NVRTC has none).
#pragma once
#include "types.cuh"

#if !defined(CUPYCONV_DEVICE_CUDA) && !defined(CUPYCONV_DEVICE_EMULATED)
#error "include platform.cuh before common/swizzle.cuh"
#endif

namespace cc {

/// CuTe's Swizzle<B, M, S>: XOR the B bits at M + S into the B bits at M (see the top).
template <int B, int M, int S>
struct Swizzle {
  static_assert(B >= 0 && M >= 0 && S >= B, "Swizzle<B, M, S> needs B, M >= 0 and S >= B");
  static constexpr int kBits = B;     ///< bits XORed
  static constexpr int kBase = M;     ///< low bits that never move (log2 of the unit)
  static constexpr int kShift = S;    ///< distance from the row bits to the column bits
  static constexpr unsigned kYMask = ((1u << B) - 1u) << (M + S);  ///< the row bits

  /// The stored offset of linear offset `offset` (>= 0).
  static CC_CONSTEXPR int apply(int offset) {
    return offset ^ static_cast<int>((static_cast<unsigned>(offset) & kYMask) >> S);
  }

  /// Pointer to the element at linear offset `offset` of a swizzled buffer `base`.
  template <typename T>
  static CC_DEVICE T* at(T* base, int offset) { return base + apply(offset); }
};

/// No swizzle (the identity), for the same code with a plain layout.
using SwizzleNone = Swizzle<0, 0, 0>;

/// The 128-byte-row swizzle of an element of `Bytes` bytes (2, 4 or 8): 16-byte units,
/// unit u of row r stored at unit u ^ (r % 8); offsets in elements.
template <int Bytes> struct Swizzle128B;
template <> struct Swizzle128B<2> { using type = Swizzle<3, 3, 3>; };
template <> struct Swizzle128B<4> { using type = Swizzle<3, 2, 3>; };
template <> struct Swizzle128B<8> { using type = Swizzle<3, 1, 3>; };

/// Byte offset of logical 16-byte chunk `c` (0..7) of row `r` in a tile of 128-byte rows
/// under Swizzle128B (any element size): 128 r + 16 (c ^ (r % 8)), the unit the
/// multistage implicit GEMM copies and ldmatrix reads (its K-tile is one such row).  This
/// closed form is what ptxas folds into one 3-input LOP3; `swizzle128_chunk_form_holds`
/// proves it equal to Swizzle128B<Bytes>::type::apply at compile time.
CC_CONSTEXPR int swizzle128_chunk_offset(int r, int c) { return 128 * r + 16 * (c ^ (r & 7)); }

/// Whether swizzle128_chunk_offset(r, c) == Bytes * apply(r * 128 / Bytes + c * 16 / Bytes)
/// for every chunk of the 16 rows (two periods of the row bits) and every element of it.
template <int Bytes>
CC_CONSTEXPR bool swizzle128_chunk_form_holds() {
  using Sw = typename Swizzle128B<Bytes>::type;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c)
      for (int e = 0; e < 16 / Bytes; ++e)
        if (swizzle128_chunk_offset(r, c) + Bytes * e !=
            Bytes * Sw::apply(r * (128 / Bytes) + c * (16 / Bytes) + e))
          return false;
  return true;
}
static_assert(swizzle128_chunk_form_holds<2>() && swizzle128_chunk_form_holds<4>() &&
                  swizzle128_chunk_form_holds<8>(),
              "swizzle128_chunk_offset is Swizzle128B's mapping");

}  // namespace cc
