// cupyconv: index math shared by the convolution kernels.
//
//   OutputPosition  : GEMM row m -> (batch n, output coordinates, base padded coordinates)
//   gather_input    : x element at padded coordinates, through the boundary remap
//   Epilogue        : y = alpha * acc + beta * y + bias[k]   (beta == 0: y is not read)
#pragma once
#include "types.cuh"
#include "fast_divmod.cuh"
#include "boundary.cuh"
#include "conv_params.cuh"
#include "launch_config.cuh"

namespace cc {

/// Decomposition of one GEMM row m = (n - n0) * prod(O) + o.
template <int R, typename Index>
struct OutputPosition {
  Index n;        ///< absolute batch index
  Index o;        ///< linear output position within the image
  Index coord[R]; ///< output coordinates

  CC_DEVICE void set(const ConvParams<R>& p, Index m) {
    Index nl;
    FastDivmod<Index>(p.div_out_size).divmod(m, nl, o);
    n = static_cast<Index>(p.n0) + nl;
    split_row_major(p.div_out, o, coord);
  }

  /// Padded input coordinates of weight tap 0: coord * stride - pad_before, per axis.
  CC_DEVICE void padded_base(const ConvParams<R>& p, Index (&base)[R]) const {
#pragma unroll
    for (int i = 0; i < R; ++i) {
      base[i] = coord[i] * static_cast<Index>(p.stride[i]) - static_cast<Index>(p.pad_before[i]);
    }
  }

  /// Offset of y[n, k, coord] for output channel k.
  CC_DEVICE Index y_offset(const ConvParams<R>& p, Index k) const {
    Index off = n * static_cast<Index>(p.y_stride_n) + k * static_cast<Index>(p.y_stride_k);
#pragma unroll
    for (int i = 0; i < R; ++i) off += coord[i] * static_cast<Index>(p.y_stride[i]);
    return off;
  }
};

/// Splits a linear tap index (row-major over the kernel axes) into per-axis taps.
template <int R, typename Index>
CC_DEVICE void split_tap(const ConvParams<R>& p, Index tap, Index (&kappa)[R]) {
  split_row_major(p.div_k, tap, kappa);
}

/// Effective (position-space) tap of weight tap `kappa` on axis i.
template <int R, typename Index>
CC_DEVICE Index effective_tap(const ConvParams<R>& p, int i, Index kappa) {
  return p.flip ? static_cast<Index>(p.k_ext[i]) - 1 - kappa : kappa;
}

/// Reads x at padded coordinates base[i] + dilation[i] * kappa_eff[i] of the
/// image/channel starting at `x_nc`; constant-mode padding yields `cval`.
/// Offset of x at padded coordinates base[i] + dilation[i] * kappa_eff[i] (added to
/// `x_nc`) through the boundary remap; `inside` is false in constant-mode padding.
template <int R, typename Index>
CC_DEVICE Index gather_offset(const ConvParams<R>& p, Index x_nc, const Index (&base)[R],
                              const Index (&kappa)[R], bool& inside) {
  Index off = x_nc;
  inside = true;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    Index q = base[i] + static_cast<Index>(p.dilation[i]) * effective_tap(p, i, kappa[i]);
    inside = remap_coord(q, static_cast<Index>(p.in_ext[i]), static_cast<int>(p.pad_mode)) && inside;
    off += q * static_cast<Index>(p.x_stride[i]);
  }
  return off;
}

template <typename T, int R, typename Index>
CC_DEVICE T gather_input(const ConvParams<R>& p, const T* __restrict__ x, Index x_nc,
                         const Index (&base)[R], const Index (&kappa)[R], T cval) {
  bool inside;
  const Index off = gather_offset(p, x_nc, base, kappa, inside);
  return inside ? x[off] : cval;
}

/// Fused output stage y = alpha * acc + beta * y + bias[k].
template <typename T, typename Acc>
struct Epilogue {
  Acc alpha;      ///< scale of the convolution result
  Acc beta;       ///< scale of the previous y
  bool read_y;    ///< beta != 0
  bool has_bias;  ///< add bias[k]
  long long bias_stride;  ///< element stride of bias

  template <int R>
  CC_DEVICE explicit Epilogue(const ConvParams<R>& p)
      : alpha(make_scalar<Acc>(p.alpha_re, p.alpha_im)),
        beta(make_scalar<Acc>(p.beta_re, p.beta_im)),
        read_y(p.beta_re != 0.0 || p.beta_im != 0.0),
        has_bias(p.has_bias != 0),
        bias_stride(p.bias_stride) {}

  template <typename Index>
  CC_DEVICE void operator()(T* __restrict__ y, Index y_off, const T* __restrict__ bias, Index k,
                            Acc acc) const {
    Acc v = alpha * acc;
    if (read_y) v = fma(beta, to_accum<Acc>(y[y_off]), v);
    if (has_bias) v += to_accum<Acc>(bias[k * static_cast<Index>(bias_stride)]);
    y[y_off] = from_accum<T>(v);
  }
};

/// Grid-stride loop bounds in 64-bit so the increment never overflows `Index`.
CC_DEVICE long long global_thread_id() {
  return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}
CC_DEVICE long long global_thread_count() {
  return static_cast<long long>(gridDim.x) * blockDim.x;
}

}  // namespace cc
