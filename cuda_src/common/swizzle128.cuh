// cupyconv: the XOR swizzle of a shared tile with 128-byte rows (issue 26).
//
// A row holds 8 chunks of 16 bytes (32 TF32 floats or 64 halves: one K-tile of the
// multistage implicit GEMM).  Logical chunk c of row r is stored at chunk c ^ (r & 7):
//
//   byte offset(r, c) = 128 r + 16 (c ^ (r & 7))
//
// Why it is conflict-free (tests/kernels/test_multistage_banks.py checks it on the
// kernel's own access lists, and shows the unswizzled layout conflicts 8-way):
// * cp.async writes of 16 bytes go through shared memory 8 lanes at a time; the
//   multistage copier gives 8 consecutive lanes the 8 chunks of one row, which the XOR
//   permutes: 8 distinct chunks = all 32 banks.
// * ldmatrix reads one matrix (8 rows, one 16-byte chunk each) per phase; its rows are 8
//   consecutive rows starting at a multiple of 8, so r & 7 takes every value once and
//   the 8 chunks are again distinct.
// Header-only, no standard library.
#pragma once
#include "types.cuh"

namespace cc {

/// [rows][8 x 16 bytes] with chunk c of row r at chunk c ^ (r & 7).
struct Swizzle128 {
  static constexpr int kRowBytes = 128;  ///< bytes per row
  static constexpr int kChunks = 8;      ///< 16-byte chunks per row
  /// Physical chunk of logical chunk `c` in row `r`.
  static CC_CONSTEXPR int chunk(int r, int c) { return c ^ (r & 7); }
  /// Byte offset of logical chunk `c` of row `r`.
  static CC_CONSTEXPR int offset(int r, int c) { return r * kRowBytes + 16 * chunk(r, c); }
};

}  // namespace cc
