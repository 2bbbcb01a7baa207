// cupyconv: channels-first -> channels-last re-layout of one operand, any spatial rank R
// (issue 26 item 1).
//
//   relayout_channels_last<TIn, TOut, R, Index>(RelayoutParams<R> p, const TIn* x, TOut* y)
//
// x is a logical (L, C, *S) view with any strides (negative and zero too): activations
// (N, C, *S) or weights (K, C/G, *KS).  y is the contiguous (L, *S, C) array, which the
// multistage implicit GEMM reads as the channels-last view of the same logical operand
// (x (N, *S, C), w KRSC: channel strides 1, whole 128-byte K-tiles of channels).
//
// One bandwidth pass: per lead index l the (C, S) plane is transposed through a 32 x 33
// shared tile (S = prod(ext), row-major over the spatial axes).  A block of
// CUPYCONV_BLOCK_THREADS threads is 32 lanes x kRows rows: the read walks 32 consecutive
// spatial positions per warp (coalesced on a channels-first x, whose innermost spatial
// stride is 1), the write 32 consecutive channels per warp (coalesced on y); the padding
// column keeps both shared accesses free of bank conflicts for 4-byte elements.  Tiles
// (l, channel tile, spatial tile) are walked grid-stride; their index and the spatial
// coordinates are split with fast divmod (the host packs the multipliers).
//
// The element conversion is fused into the same pass: with p.round_tf32 a float output is
// rounded to TF32 as cvt.rna.tf32.f32 (cc::to_tf32: NaN and Inf keep their top bits), so
// the TF32 tile's operands need no separate rounded copy; TIn != TOut casts through float
// (float -> float16 / bfloat16: one rounding).
//
// Launch: 1-D grid of any size (grid-stride over p.tiles), blocks of
// CUPYCONV_BLOCK_THREADS threads (cuda_src/common/launch_config.cuh), no dynamic shared
// memory.  The host mirror of the parameters is cupyconv/_kernels/relayout_launch.py.
#include "../platform.cuh"
#include "../common/conv_common.cuh"
#include "../common/mma_atoms.cuh"

namespace cc {

/// Parameters of one re-layout launch (every field 8 bytes wide, as ConvParams).
template <int R>
struct RelayoutParams {
  long long lead;            ///< L: images (x) or output channels (w)
  long long channels;        ///< C (x) or C/G (w)
  long long spatial;         ///< S = prod(ext)
  long long round_tf32;      ///< 1: round a float output to TF32 (cvt.rna)
  long long in_stride_lead;  ///< element stride of x's lead axis
  long long in_stride_c;     ///< element stride of x's channel axis
  long long in_stride[R];    ///< element strides of x's spatial axes
  long long c_tiles;         ///< ceil(C / 32)
  long long s_tiles;         ///< ceil(S / 32)
  long long tiles;           ///< L * c_tiles * s_tiles
  FastDivmodParams div_ext[R];  ///< the spatial extents (innermost last)
  FastDivmodParams div_s_tiles;
  FastDivmodParams div_c_tiles;
};
static_assert(sizeof(RelayoutParams<1>) == 8 * (9 + 1 + 4 * 3) &&
              sizeof(RelayoutParams<8>) == 8 * (9 + 8 + 4 * 10),
              "RelayoutParams<R>: 9 + R words, then R + 2 divmod records "
              "(mirrored by cupyconv/_kernels/relayout_launch.py)");

/// One element of the re-layout: TIn -> TOut through float (one rounding).
template <typename TIn, typename TOut>
struct RelayoutElement {
  static CC_DEVICE TOut convert(TIn v, bool /*round_tf32*/) {
    return from_accum<TOut, float>(to_accum<float, TIn>(v));
  }
};
/// The same type: a copy.
template <typename T>
struct RelayoutElement<T, T> {
  static CC_DEVICE T convert(T v, bool /*round_tf32*/) { return v; }
};
/// float: a copy, or the TF32 rounding.
template <>
struct RelayoutElement<float, float> {
  static CC_DEVICE float convert(float v, bool round_tf32) {
    return round_tf32 ? __uint_as_float(to_tf32(v)) : v;
  }
};

}  // namespace cc

template <typename TIn, typename TOut, int R, typename Index>
__global__ void CUPYCONV_LAUNCH_BOUNDS
relayout_channels_last(const cc::RelayoutParams<R> p, const TIn* __restrict__ x,
                       TOut* __restrict__ y) {
  static_assert(cc::IsIndexType<Index>::value, "Index must be int or long long");
  constexpr int kTile = 32;
  constexpr int kRows = cc::kBlockThreads / kTile;
  cc::require_block_shape();
  CUPYCONV_STATIC_SHARED(TOut, tile, [kTile][kTile + 1]);
  const int lane = static_cast<int>(threadIdx.x) % kTile;
  const int row = static_cast<int>(threadIdx.x) / kTile;
  const Index C = static_cast<Index>(p.channels);
  const Index S = static_cast<Index>(p.spatial);
  const bool round = p.round_tf32 != 0;
  const cc::FastDivmod<Index> div_s(p.div_s_tiles), div_c(p.div_c_tiles);

  for (long long t = blockIdx.x; t < p.tiles; t += gridDim.x) {
    Index rest, st, l, ct;
    div_s.divmod(static_cast<Index>(t), rest, st);
    div_c.divmod(rest, l, ct);
    const Index s0 = st * kTile, c0 = ct * kTile;
    // read: lane = spatial position, rows = channels
    const Index s = s0 + lane;
    if (s < S) {
      Index off = l * static_cast<Index>(p.in_stride_lead);
      Index rem = s;
#pragma unroll
      for (int i = R - 1; i >= 0; --i) {
        Index q, coord;
        cc::FastDivmod<Index>(p.div_ext[i]).divmod(rem, q, coord);
        off += coord * static_cast<Index>(p.in_stride[i]);
        rem = q;
      }
      for (int j = row; j < kTile; j += kRows) {
        const Index c = c0 + j;
        if (c < C) {
          tile[j][lane] = cc::RelayoutElement<TIn, TOut>::convert(
              x[off + c * static_cast<Index>(p.in_stride_c)], round);
        }
      }
    }
    __syncthreads();
    // write: lane = channel, rows = spatial positions
    const Index c = c0 + lane;
    if (c < C) {
      for (int j = row; j < kTile; j += kRows) {
        const Index s2 = s0 + j;
        if (s2 < S) y[(l * S + s2) * C + c] = tile[lane][j];
      }
    }
    __syncthreads();
  }
}
