// cupyconv: col2vol, the exact adjoint of vol2col, as a deterministic gather.
//
// Each thread owns one input element x[n, c, s] and sums every column entry
// that vol2col reads from it:
//
//   dx[n, c, s] = sum over (tap, o) with remap(o*stride - pad + dil*tap_eff) == s
//                 of col[c * prod(KS) + tap][(n - n0) * prod(O) + o]
//
// The pairs factor per axis (cc::AxisPreimages enumerates them, including the
// several padded positions through which reflect/symmetric/wrap/edge padding
// read the same element), so the sum is an odometer over per-axis iterators.
// No atomics: the summation order is fixed, results are bitwise reproducible.
// Constant padding contributes nothing (the adjoint of the linear part).
// Output: dx = alpha * sum + beta * dx, written through the x strides.
#include "../platform.cuh"
#include "../common/conv_common.cuh"

/// Launch: 1-D grid of any size (grid-stride) over n_count * C * prod(S) elements,
/// blocks of CUPYCONV_BLOCK_THREADS threads (cuda_src/common/launch_config.cuh).
template <typename T, int R, typename Index>
__global__ void CUPYCONV_LAUNCH_BOUNDS
col2vol(const cc::ConvParams<R> p, const T* __restrict__ col, T* __restrict__ dx) {
  static_assert(cc::IsIndexType<Index>::value, "Index must be int or long long");
  cc::require_block_shape();
  using Acc = typename cc::AccumType<T>::type;
  const Index M = static_cast<Index>(p.gemm_m);
  const Index taps = static_cast<Index>(p.taps);
  const Index out_size = static_cast<Index>(p.out_size);
  const long long total = p.n_count * p.C * p.in_size;
  const cc::FastDivmod<Index> div_in_size(p.div_in_size);
  const cc::FastDivmod<Index> div_C(p.div_C);
  const cc::Epilogue<T, Acc> epilogue(p);

  for (long long t = cc::global_thread_id(); t < total; t += cc::global_thread_count()) {
    Index nc, s_lin, nl, c;
    div_in_size.divmod(static_cast<Index>(t), nc, s_lin);
    div_C.divmod(nc, nl, c);
    Index s[R];
    cc::split_row_major(p.div_in, s_lin, s);

    cc::AxisPreimages<Index> axis[R];
    bool any = true;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      axis[i].init(s[i], static_cast<Index>(p.in_ext[i]), static_cast<Index>(p.k_ext[i]),
                   static_cast<Index>(p.out_ext[i]), static_cast<Index>(p.stride[i]),
                   static_cast<Index>(p.dilation[i]), static_cast<Index>(p.pad_before[i]),
                   p.flip != 0, static_cast<int>(p.pad_mode));
      any = axis[i].first() && any;
    }

    Acc acc = cc::zero<Acc>();
    const T* __restrict__ col_nc = col + c * taps * M + nl * out_size;
    while (any) {
      Index tap = 0, o = 0;
#pragma unroll
      for (int i = 0; i < R; ++i) {
        tap = tap * static_cast<Index>(p.k_ext[i]) + axis[i].kappa;
        o = o * static_cast<Index>(p.out_ext[i]) + axis[i].o;
      }
      acc += cc::to_accum<Acc>(col_nc[tap * M + o]);
      // odometer over the per-axis pair lists, innermost fastest; fully unrolled so
      // axis[i] is always a compile-time index (registers, never local memory)
      bool advanced = false;
#pragma unroll
      for (int i = R - 1; i >= 0; --i) {
        if (!advanced) {
          advanced = axis[i].next();
          if (!advanced) axis[i].first();
        }
      }
      any = advanced;
    }

    Index x_off = (static_cast<Index>(p.n0) + nl) * static_cast<Index>(p.x_stride_n) +
                  c * static_cast<Index>(p.x_stride_c);
#pragma unroll
    for (int i = 0; i < R; ++i) x_off += s[i] * static_cast<Index>(p.x_stride[i]);
    epilogue(dx, x_off, static_cast<const T*>(nullptr), Index(0), acc);
  }
}
