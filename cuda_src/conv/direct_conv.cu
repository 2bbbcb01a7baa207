// cupyconv: direct convolution for the single-/few-channel scientific case.
//
// Each CTA computes a TILE_H x TILE_W tile of one output plane: the two
// innermost spatial axes H = R-2 and W = R-1 (for R == 1 only W exists and
// TILE_H must be 1) of one (n, k, outer output position).  Outer axes
// 0..R-3 are looped.  For every input channel of the group, every outer
// kernel tap and every chunk of (kch x kcw) inner taps the CTA
//
//   1. stages the input tile with its halo, (TILE_H-1)*sh + dh*(kch-1) + 1 rows by
//      (TILE_W-1)*sw + dw*(kcw-1) + 1 columns, resolved through the boundary remap
//      (the only place the padding mode is seen), each row padded to `pitch`,
//   2. stages the matching kch x kcw weights,
//   3. accumulates the tile from shared memory: each thread owns a register block of
//      PH rows x PW CONSECUTIVE columns.  With stride and dilation 1 along W (the
//      scientific case) it loads, per kernel row, one window of PW + kDirectTapBlock
//      inputs with 16-byte vector loads and reuses it across kDirectTapBlock taps
//      (weights as broadcast loads): PH*PW*kDirectTapBlock FMAs per
//      PH*(window/vector) + kDirectTapBlock shared loads.  Other strides and
//      dilations take a scalar path over the same layout.
//
// The chunk (kch, kcw) and the padded row pitch are chosen on the host so the
// dynamic shared memory fits (params.aux[0..2], launch.direct_smem_layout); any
// kernel extent works.  Blocks are a flat
// grid-stride sequence over n_count * K * prod(outer O) * tiles_h * tiles_w
// (params.div_grid = tiles_w, tiles_h, prod(outer O)).
#include "../platform.cuh"
#include "../common/conv_common.cuh"

namespace cc {

/// Sixteen bytes of `Acc` elements: one vector shared-memory load (LDS.128).
template <typename Acc>
struct alignas(16) Vec16 {
  static constexpr int kSize = 16 / sizeof(Acc) > 0 ? 16 / sizeof(Acc) : 1;  ///< elements
  Acc v[kSize];  ///< the elements
};

/// Register layout of the direct kernel for one tile: threads, blocks, window.
template <typename Acc, int TILE_H, int TILE_W>
struct DirectLayout {
  static constexpr int kThreads = kBlockThreads;
  static constexpr int kThreadsW = TILE_H == 1 ? kThreads : TILE_W / 8;  ///< threads along W
  static constexpr int kThreadsH = kThreads / kThreadsW;                 ///< threads along H
  static constexpr int PH = TILE_H / kThreadsH;                          ///< rows per thread
  static constexpr int PW = TILE_W / kThreadsW;                          ///< consecutive columns
  static constexpr int kVec = Vec16<Acc>::kSize;                        ///< elements per LDS.128
  static constexpr int kTaps = kDirectTapBlock;                          ///< taps per window
  /// Window of PW + kTaps - 1 inputs, rounded up to whole vectors.
  static constexpr int kWindow = (PW + kTaps - 1 + kVec - 1) / kVec * kVec;
  /// The vector path needs whole vectors per thread (aligned windows).
  static constexpr bool kVectorPath = PW % kVec == 0 && PW >= kVec;
  static_assert(kThreads % kThreadsW == 0, "Require TILE_W / 8 to divide the block");
  static_assert(kTaps % kVec == 0, "Require kDirectTapBlock to be whole vectors (aligned windows)");
  static_assert(PH * kThreadsH == TILE_H && PW * kThreadsW == TILE_W,
                "Require TILE_H, TILE_W multiples of the CUPYCONV_BLOCK_THREADS layout");
};

}  // namespace cc

template <typename T, typename Acc, int R, typename Index, int TILE_H, int TILE_W>
__global__ void CUPYCONV_LAUNCH_BOUNDS
direct_conv(const cc::ConvParams<R> p, const T* __restrict__ x, const T* __restrict__ w,
            T* __restrict__ y, const T* __restrict__ bias) {
  // Types and tile geometry ---------------------------------------------------
  static_assert(cc::IsIndexType<Index>::value, "Index must be int or long long");
  static_assert(R >= 2 || TILE_H == 1, "Require TILE_H == 1 for 1-D problems");
  using Layout = cc::DirectLayout<Acc, TILE_H, TILE_W>;
  constexpr int kThreads = Layout::kThreads;
  constexpr int kThreadsW = Layout::kThreadsW;
  constexpr int PH = Layout::PH;
  constexpr int PW = Layout::PW;
  constexpr int kTaps = Layout::kTaps;
  constexpr int kAxisW = R - 1;
  constexpr int kAxisH = R - 2;   // < 0 for R == 1
  constexpr int kOuter = R - 2 > 0 ? R - 2 : 0;
  constexpr int kStageW = 32;     // staging: 32 threads per row (coalesced reads of x)

  cc::require_block_shape();
  CUPYCONV_DYNAMIC_SHARED(Acc, smem);

  const int tid = static_cast<int>(threadIdx.x);
  const int tw = tid % kThreadsW;
  const int th = tid / kThreadsW;
  const int pm = static_cast<int>(p.pad_mode);
  const bool flip = p.flip != 0;
  const T cval = cc::make_scalar<T>(p.cval_re, p.cval_im);
  const cc::Epilogue<T, Acc> epilogue(p);

  // Inner-axis geometry (H degenerates to extent 1 for R == 1).
  auto axis_or = [&](const long long* a, int axis, long long dflt) -> Index {
    return static_cast<Index>(axis >= 0 ? a[axis] : dflt);
  };
  const Index OW = axis_or(p.out_ext, kAxisW, 1), OH = axis_or(p.out_ext, kAxisH, 1);
  const Index SW = axis_or(p.in_ext, kAxisW, 1), SH = axis_or(p.in_ext, kAxisH, 1);
  const Index KW = axis_or(p.k_ext, kAxisW, 1), KH = axis_or(p.k_ext, kAxisH, 1);
  const Index sw = axis_or(p.stride, kAxisW, 1), sh = axis_or(p.stride, kAxisH, 1);
  const Index dw = axis_or(p.dilation, kAxisW, 1), dh = axis_or(p.dilation, kAxisH, 1);
  const Index pw = axis_or(p.pad_before, kAxisW, 0), ph = axis_or(p.pad_before, kAxisH, 0);
  const Index xsw = axis_or(p.x_stride, kAxisW, 0), xsh = axis_or(p.x_stride, kAxisH, 0);
  const Index wsw = axis_or(p.w_stride, kAxisW, 0), wsh = axis_or(p.w_stride, kAxisH, 0);
  const Index ysw = axis_or(p.y_stride, kAxisW, 0), ysh = axis_or(p.y_stride, kAxisH, 0);
  const int kch = static_cast<int>(p.aux[0]);
  const int kcw = static_cast<int>(p.aux[1]);
  const int pitch = static_cast<int>(p.aux[2]);   ///< padded row length of the input tile
  const int in_h = (TILE_H - 1) * static_cast<int>(sh) + static_cast<int>(dh) * (kch - 1) + 1;
  const int in_w = (TILE_W - 1) * static_cast<int>(sw) + static_cast<int>(dw) * (kcw - 1) + 1;
  Acc* __restrict__ s_in = smem;                 // [in_h][pitch]
  Acc* __restrict__ s_w = smem + in_h * pitch;   // [kch][kcw]
  // the window of the last thread reaches kTaps - 1 elements past the tile's columns
  const bool vector_path = Layout::kVectorPath && sw == 1 && dw == 1 &&
                           pitch % Layout::kVec == 0 && pitch >= in_w + kTaps;
  cc::require(pitch >= in_w, "direct_conv: params.aux[2] (row pitch) is shorter than a row");

  Index outer_taps = 1;
#pragma unroll
  for (int j = 0; j < kOuter; ++j) outer_taps *= static_cast<Index>(p.k_ext[j]);

  const cc::FastDivmod<Index> div_tiles_w(p.div_grid[0]);
  const cc::FastDivmod<Index> div_tiles_h(p.div_grid[1]);
  const cc::FastDivmod<Index> div_outer(p.div_grid[2]);
  const long long total_blocks = p.n_count * p.K * p.div_grid[0].divisor *
                                 p.div_grid[1].divisor * p.div_grid[2].divisor;

  for (long long blk = blockIdx.x; blk < total_blocks; blk += gridDim.x) {
    // Block -> (n, k, outer output position, tile) -------------------------------
    Index rest, tile_w, tile_h, outer, nl, k;
    div_tiles_w.divmod(static_cast<Index>(blk), rest, tile_w);
    div_tiles_h.divmod(rest, rest, tile_h);
    div_outer.divmod(rest, rest, outer);
    nl = rest / static_cast<Index>(p.K);
    k = rest - nl * static_cast<Index>(p.K);
    const Index n = static_cast<Index>(p.n0) + nl;
    const Index g = k / static_cast<Index>(p.kpg);
    Index o_outer[kOuter > 0 ? kOuter : 1];
    for (int j = kOuter - 1; j >= 0; --j) {
      Index q;
      cc::FastDivmod<Index>(p.div_out[j]).divmod(outer, q, o_outer[j]);
      outer = q;
    }
    const Index oh0 = tile_h * TILE_H, ow0 = tile_w * TILE_W;

    Acc acc[PH][PW];
#pragma unroll
    for (int a = 0; a < PH; ++a)
#pragma unroll
      for (int b = 0; b < PW; ++b) acc[a][b] = cc::zero<Acc>();

    for (Index cg = 0; cg < static_cast<Index>(p.cpg); ++cg) {
      const Index c = g * static_cast<Index>(p.cpg) + cg;
      for (Index ot = 0; ot < outer_taps; ++ot) {
        // Outer axes: one padded coordinate each (kappa_p = position-space tap).
        Index x_off = n * static_cast<Index>(p.x_stride_n) + c * static_cast<Index>(p.x_stride_c);
        Index w_off = k * static_cast<Index>(p.w_stride_k) + cg * static_cast<Index>(p.w_stride_c);
        bool outer_inside = true;
        Index rem = ot;
        for (int j = kOuter - 1; j >= 0; --j) {
          const Index kj = static_cast<Index>(p.k_ext[j]);
          const Index kappa_p = rem % kj;
          rem /= kj;
          Index q = o_outer[j] * static_cast<Index>(p.stride[j]) - static_cast<Index>(p.pad_before[j]) +
                    static_cast<Index>(p.dilation[j]) * kappa_p;
          outer_inside = cc::remap_coord(q, static_cast<Index>(p.in_ext[j]), pm) && outer_inside;
          x_off += q * static_cast<Index>(p.x_stride[j]);
          w_off += (flip ? kj - 1 - kappa_p : kappa_p) * static_cast<Index>(p.w_stride[j]);
        }
        for (Index kh0 = 0; kh0 < KH; kh0 += kch) {
          for (Index kw0 = 0; kw0 < KW; kw0 += kcw) {
            // 1. input tile with halo, boundary resolved here
            const Index qh0 = oh0 * sh - ph + dh * kh0;
            const Index qw0 = ow0 * sw - pw + dw * kw0;
            for (int eh = tid / kStageW; eh < in_h; eh += kThreads / kStageW) {
              Index qh = qh0 + eh;
              const bool row_inside = (R == 1 || cc::remap_coord(qh, SH, pm)) && outer_inside;
              for (int ew = tid % kStageW; ew < in_w; ew += kStageW) {
                Index qw = qw0 + ew;
                const bool inside = cc::remap_coord(qw, SW, pm) && row_inside;
                s_in[eh * pitch + ew] = cc::to_accum<Acc>(inside ? x[x_off + qh * xsh + qw * xsw] : cval);
              }
            }
            // 2. weights of this chunk (position-space taps kh0+a, kw0+b)
            for (int e = tid; e < kch * kcw; e += kThreads) {
              const int a = e / kcw, b = e - a * kcw;
              const Index kp_h = kh0 + a, kp_w = kw0 + b;
              Acc v = cc::zero<Acc>();
              if (kp_h < KH && kp_w < KW) {
                const Index kh = flip ? KH - 1 - kp_h : kp_h;
                const Index kw = flip ? KW - 1 - kp_w : kp_w;
                v = cc::to_accum<Acc>(w[w_off + kh * wsh + kw * wsw]);
              }
              s_w[e] = v;
            }
            __syncthreads();
            // 3. accumulate the PH x PW register block over the chunk's taps that exist:
            //    the last chunk of an axis may reach past the kernel, where a zero weight
            //    times a staged NaN or Inf would still be NaN (outputs that never read it)
            const int kch_e = KH - kh0 < kch ? static_cast<int>(KH - kh0) : kch;
            const int kcw_e = KW - kw0 < kcw ? static_cast<int>(KW - kw0) : kcw;
            if (vector_path) {
              for (int a = 0; a < kch_e; ++a) {
                const int row0 = th * PH * static_cast<int>(sh) + a * static_cast<int>(dh);
                for (int b0 = 0; b0 < kcw_e; b0 += kTaps) {
                  Acc wreg[kTaps];
#pragma unroll
                  for (int t = 0; t < kTaps; ++t) {
                    wreg[t] = b0 + t < kcw_e ? s_w[a * kcw + b0 + t] : cc::zero<Acc>();
                  }
#pragma unroll
                  for (int i = 0; i < PH; ++i) {
                    const Acc* src = s_in + (row0 + i * static_cast<int>(sh)) * pitch + tw * PW + b0;
                    Acc win[Layout::kWindow];   // src is 16-byte aligned: pitch, PW, b0
#pragma unroll
                    for (int v = 0; v < Layout::kWindow / Layout::kVec; ++v) {
                      const cc::Vec16<Acc> chunk = reinterpret_cast<const cc::Vec16<Acc>*>(src)[v];
#pragma unroll
                      for (int e = 0; e < Layout::kVec; ++e) win[v * Layout::kVec + e] = chunk.v[e];
                    }
#pragma unroll
                    for (int t = 0; t < kTaps; ++t) {
                      if (b0 + t < kcw_e) {
#pragma unroll
                        for (int j = 0; j < PW; ++j) acc[i][j] = cc::fma(win[j + t], wreg[t], acc[i][j]);
                      }
                    }
                  }
                }
              }
            } else {
              for (int a = 0; a < kch_e; ++a) {
                for (int b = 0; b < kcw_e; ++b) {
                  const Acc wv = s_w[a * kcw + b];
                  const int row0 = a * static_cast<int>(dh), col0 = b * static_cast<int>(dw);
#pragma unroll
                  for (int i = 0; i < PH; ++i) {
                    const int r = (th * PH + i) * static_cast<int>(sh) + row0;
#pragma unroll
                    for (int j = 0; j < PW; ++j) {
                      const int cidx = (tw * PW + j) * static_cast<int>(sw) + col0;
                      acc[i][j] = cc::fma(s_in[r * pitch + cidx], wv, acc[i][j]);
                    }
                  }
                }
              }
            }
            __syncthreads();
          }
        }
      }
    }

    // Epilogue ----------------------------------------------------------------
    Index y_base = n * static_cast<Index>(p.y_stride_n) + k * static_cast<Index>(p.y_stride_k);
    for (int j = 0; j < kOuter; ++j) y_base += o_outer[j] * static_cast<Index>(p.y_stride[j]);
#pragma unroll
    for (int i = 0; i < PH; ++i) {
      const Index oh = oh0 + th * PH + i;
#pragma unroll
      for (int j = 0; j < PW; ++j) {
        const Index ow = ow0 + tw * PW + j;
        if (oh < OH && ow < OW) epilogue(y, y_base + oh * ysh + ow * ysw, bias, k, acc[i][j]);
      }
    }
  }
}
