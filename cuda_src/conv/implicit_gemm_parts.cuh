// cupyconv: the implicit GEMM's per-thread helpers (conv/implicit_gemm_fprop.cu): vector
// fragment reads, the once-per-tap offsets (out of line), the staging conversion and the
// (tap, channel) cursor of GEMM-K.
#pragma once
#include "../platform.cuh"
#include "../common/conv_common.cuh"
#include "../common/mma_atoms.cuh"
#include "../common/cp_async.cuh"

namespace cc {

/// Reads N consecutive elements from shared memory: 16-byte vector loads when the
/// fragment is whole vectors (its start is then 16-byte aligned), else scalar loads.
template <typename Acc, int N>
CC_DEVICE void load_fragment(const Acc* __restrict__ src, Acc (&dst)[N]) {
  struct alignas(16) Vec { Acc v[16 / sizeof(Acc) > 0 ? 16 / sizeof(Acc) : 1]; };
  constexpr int kVec = sizeof(Vec) / sizeof(Acc);
  if constexpr (sizeof(Acc) <= 16 && (N * sizeof(Acc)) % 16 == 0) {
#pragma unroll
    for (int v = 0; v < N / kVec; ++v) {
      const Vec chunk = reinterpret_cast<const Vec*>(src)[v];
#pragma unroll
      for (int e = 0; e < kVec; ++e) dst[v * kVec + e] = chunk.v[e];
    }
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) dst[e] = src[e];
  }
}

/// Offset of x at the padded coordinates `base + dilation * tap_eff` of weight tap
/// `tap` (row offset `x_row` added) and whether it is inside (constant padding
/// outside reads cval).  Out of line: it runs once per crossed tap, so it stays out
/// of the main loop's instruction stream.
template <typename Index>
struct TapOffset {
  Index off;    ///< element offset
  bool inside;  ///< false: constant padding (read cval)
};

template <int R, typename Index>
__device__ __noinline__ TapOffset<Index> gather_tap_offset(const ConvParams<R>& p,
                                                           const Index (&base)[R], Index x_row,
                                                           Index tap) {
  Index kappa[R];
  split_tap(p, tap, kappa);
  bool inside;
  const Index off = gather_offset(p, x_row, base, kappa, inside);
  return TapOffset<Index>{off, inside};
}

/// One A-loader row of the gather: GEMM row m's base padded coordinates and the offset of
/// its image and group in x (computed once per thread; row 0 stands in for rows past M).
template <int R, typename Index>
struct GatherRow {
  Index base[R];  ///< padded coordinates of tap 0
  Index x_n;      ///< offset of the row's image and group

  CC_DEVICE GatherRow(const ConvParams<R>& p, Index m, Index g, Index cpg, Index x_stride_c) {
    OutputPosition<R, Index> pos;
    pos.set(p, m);
#pragma unroll
    for (int i = 0; i < R; ++i) {
      base[i] = pos.coord[i] * static_cast<Index>(p.stride[i]) - static_cast<Index>(p.pad_before[i]);
    }
    x_n = pos.n * static_cast<Index>(p.x_stride_n) + g * cpg * x_stride_c;
  }
  /// The row's offset at weight tap `tap` (gather_tap_offset, out of line).
  CC_DEVICE TapOffset<Index> at(const ConvParams<R>& p, Index tap) const {
    return gather_tap_offset(p, base, x_n, tap);
  }
};

/// Offset of w at weight tap `tap` (out of line, as gather_tap_offset).
template <int R, typename Index>
__device__ __noinline__ Index weight_tap_offset(const ConvParams<R>& p, Index w_row, Index tap) {
  Index kappa[R];
  split_tap(p, tap, kappa);
  Index off = w_row;
#pragma unroll
  for (int i = 0; i < R; ++i) off += kappa[i] * static_cast<Index>(p.w_stride[i]);
  return off;
}

/// What a kernel stages in shared memory for an operand element: the accumulator type
/// (FMA variants), the tf32-rounded float (tf32 atom) or the element itself (f16, f64).
template <typename S, bool kTf32, typename T>
CC_DEVICE S to_stage(T v) {
  if constexpr (kTf32) {
    return round_tf32(v);
  } else {
    return to_accum<S>(v);
  }
}

/// Element (k, mn) of stage `buf` of a staged A or B slice array: `[stage][k][mn]`
/// (k-major), or `[stage][mn][k]` when kKContiguous (the channels-last tiles).
template <bool kKContiguous, typename Slices>
CC_DEVICE auto& slice_at(Slices& s, int buf, int k, int mn) {
  if constexpr (kKContiguous) {
    return s[buf][mn][k];
  } else {
    return s[buf][k][mn];
  }
}

/// Zeroes an [AM][AN] array of MMA accumulator fragments.
template <typename E, int AM, int AN, int N>
CC_DEVICE void zero_accumulators(E (&acc)[AM][AN][N]) {
#pragma unroll
  for (int i = 0; i < AM; ++i)
#pragma unroll
    for (int j = 0; j < AN; ++j)
#pragma unroll
      for (int e = 0; e < N; ++e) acc[i][j][e] = zero<E>();
}

/// The GEMM coordinates of a CTA of the implicit GEMM: its group, the GEMM's extents
/// and the tile's first row and column (grid x: rows, y: columns, z: groups from g0).
template <typename Index>
struct GemmBlock {
  Index g;        ///< group
  Index M;        ///< GEMM rows: n_count * prod(O)
  Index Kg;       ///< GEMM columns: output channels per group
  Index cpg;      ///< input channels per group
  Index taps;     ///< weight taps
  Index block_m;  ///< first row of the tile
  Index block_n;  ///< first column of the tile
  template <int R>
  CC_DEVICE GemmBlock(const ConvParams<R>& p, int bm, int bn)
      : g(static_cast<Index>(p.g0) + static_cast<Index>(blockIdx.z)),
        M(static_cast<Index>(p.gemm_m)), Kg(static_cast<Index>(p.kpg)),
        cpg(static_cast<Index>(p.cpg)), taps(static_cast<Index>(p.taps)),
        block_m(static_cast<Index>(blockIdx.x) * bm), block_n(static_cast<Index>(blockIdx.y) * bn) {}
};

/// Position of a GEMM-K index as (tap, channel), advanced without division.
template <typename Index>
struct TapChannel {
  Index tap;  ///< linear weight tap
  Index c;    ///< channel within the group
  /// Moves forward by `step` (< anything; loops once per crossed tap).
  CC_DEVICE void advance(Index step, Index cpg) {
    c += step;
    while (c >= cpg) {
      c -= cpg;
      ++tap;
    }
  }
};

}  // namespace cc
