// cupyconv: vol2col for any spatial rank R.
//
// Column buffer (one launch covers batch indices [n0, n0 + n_count)):
//
//   col[G][(C/G) * prod(KS)][n_count * prod(O)]   row-major
//   row    = c * prod(KS) + tap        (tap row-major over the WEIGHT taps)
//   column = (n - n0) * prod(O) + o    (o row-major over the output axes)
//
// so per group y_g (K/G x M) = W_g (K/G x gemm_k) @ col_g (gemm_k x M).  Flip
// (true convolution) and the padding modes are index math: row `tap` holds the
// input at o*stride - pad + dilation * (flip ? KS-1-tap : tap).
//
// One thread per (channel, column): it decomposes its column once with fast
// divmod and walks the taps with an odometer; consecutive threads write
// consecutive columns (coalesced) and read neighbouring output positions.
#include "../platform.cuh"
#include "../common/conv_common.cuh"

/// Launch: 1-D grid of any size (grid-stride), blocks of CUPYCONV_BLOCK_THREADS
/// threads (cuda_src/common/launch_config.cuh); params.div_grid[0] divides by gemm_m.
template <typename T, int R, typename Index>
__global__ void CUPYCONV_LAUNCH_BOUNDS
vol2col(const cc::ConvParams<R> p, const T* __restrict__ x, T* __restrict__ col) {
  static_assert(cc::IsIndexType<Index>::value, "Index must be int or long long");
  cc::require_block_shape();
  const Index M = static_cast<Index>(p.gemm_m);
  const Index taps = static_cast<Index>(p.taps);
  const long long total = p.C * p.gemm_m;
  const T cval = cc::make_scalar<T>(p.cval_re, p.cval_im);
  const cc::FastDivmod<Index> div_m(p.div_grid[0]);

  for (long long t = cc::global_thread_id(); t < total; t += cc::global_thread_count()) {
    Index c, m;
    div_m.divmod(static_cast<Index>(t), c, m);
    cc::OutputPosition<R, Index> pos;
    pos.set(p, m);
    Index base[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      base[i] = pos.coord[i] * static_cast<Index>(p.stride[i]) - static_cast<Index>(p.pad_before[i]);
    }
    const Index x_nc = pos.n * static_cast<Index>(p.x_stride_n) + c * static_cast<Index>(p.x_stride_c);
    T* __restrict__ out = col + c * taps * M + m;

    Index kappa[R];
#pragma unroll
    for (int i = 0; i < R; ++i) kappa[i] = 0;
    for (Index tap = 0; tap < taps; ++tap) {
      out[tap * M] = cc::gather_input(p, x, x_nc, base, kappa, cval);
      // odometer over the kernel axes, innermost fastest
#pragma unroll
      for (int i = R - 1; i >= 0; --i) {
        if (++kappa[i] < static_cast<Index>(p.k_ext[i])) break;
        kappa[i] = 0;
      }
    }
  }
}
