// cupyconv: the channels-last copier state of one thread of an implicit GEMM whose K-tiles
// are 128-byte rows of channels (the wgmma kernel's producer; the multistage kernel keeps
// the same state inline and shares channels_last_tap_offset): the thread's A row (GEMM
// row m, one pixel of channels-last x) and B row (output channel n, its
// channel-contiguous weights), each at the current weight tap, and a 16-byte chunk of
// cval for the A rows that fall in constant padding.
#pragma once
#include "implicit_gemm_parts.cuh"

namespace cc {

/// 16 bytes, the unit of the copies and of a swizzled chunk.
struct alignas(16) CopyChunk16 {
  unsigned v[4];
};

/// Offset in x of GEMM row `m`'s pixel at weight tap `tap` (channel 0 of group `g`,
/// channels-last) and whether it is inside; out of line: once per row per crossed tap.
template <int R, typename Index>
__device__ __noinline__ TapOffset<Index> channels_last_tap_offset(const ConvParams<R>& p, Index m,
                                                                  Index g, Index tap) {
  OutputPosition<R, Index> pos;
  pos.set(p, m);
  Index base[R];
  pos.padded_base(p, base);
  const Index x_n = pos.n * static_cast<Index>(p.x_stride_n) + g * static_cast<Index>(p.cpg);
  return gather_tap_offset(p, base, x_n, tap);
}

/// One copier thread's A row and B row (see the top).
template <typename T, int R, typename Index>
struct ChannelsLastRows {
  static constexpr int kChunk = 16 / static_cast<int>(sizeof(T));   ///< elements per chunk
  const T* a_src;      ///< the A row's pixel at the current tap (channel 0)
  const T* b_src;      ///< the B row's weights at the current tap
  bool a_pad;          ///< constant padding there: store `fill`
  bool a_row;          ///< the A row is inside the GEMM (else zero-filled)
  bool b_col;          ///< the B row is inside the GEMM
  Index m, g, w_row;   ///< GEMM row, group, offset of the B row's weights
  CopyChunk16 fill;    ///< a chunk of cval (TF32: rounded, as the operands)

  CC_DEVICE ChannelsLastRows(const ConvParams<R>& p, const T* x, const T* w, Index m_, Index M,
                             Index g_, Index n, Index Kg)
      : a_src(x), b_src(w), a_pad(false), a_row(m_ < M), b_col(n < Kg), m(m_), g(g_),
        w_row((g_ * Kg + n) * static_cast<Index>(p.w_stride_k)) {
    T* f = reinterpret_cast<T*>(&fill);
    const T cval = to_stage<T, sizeof(T) == 4>(make_scalar<T>(p.cval_re, p.cval_im));
#pragma unroll
    for (int e = 0; e < kChunk; ++e) f[e] = cval;
  }

  /// Moves both rows to weight tap `tap` (once per tap, out of line).
  CC_DEVICE void set_tap(const ConvParams<R>& p, const T* x, const T* w, Index tap) {
    if (a_row) {
      const TapOffset<Index> t = channels_last_tap_offset(p, m, g, tap);
      a_src = x + t.off;
      a_pad = !t.inside;
    }
    b_src = w + weight_tap_offset(p, w_row, tap);
  }
};

}  // namespace cc
