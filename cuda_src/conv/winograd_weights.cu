// cupyconv: the Winograd weight transform of one piece, any rank R, in one launch.
//
//   u[p][k][c] = round_to_Acc( sum_t g[p][t] * wide(w[k][c][t]) ),  p < positions,
//
// the N-D G (the Kronecker product of the axes' G, `positions x taps`, binary64, a
// program constant) applied to each (k, c) kernel of the piece's taps in binary64
// (complex: both parts), one fused multiply-add per tap in tap order (row-major over
// the R tap axes), then rounded once to the compute type Acc (float for float and
// half data).  `w` is any strided view (the oriented weights' taps of the piece: a flip
// is a negative stride); `u` is contiguous, positions x (K * Cg): the batched GEMM's A
// operand U[p][g][k/g][c].  This replaces widening the weights to float64, a DGEMM and
// a rounding copy (three device operations and two float64 temporaries) per call.
#include "../platform.cuh"
#include "../common/conv_common.cuh"

namespace cc {

/// Host mirror: cupyconv/_kernels/winograd_launch.py (weights_params_dtype); 8-byte fields.
template <int R>
struct WinogradWeights {
  long long K;              ///< output channels
  long long cg;             ///< input channels per group
  long long taps;           ///< prod(tap_ext)
  long long positions;      ///< prod(alpha): rows of g and of u
  long long stride_k, stride_c;   ///< element strides of w
  long long tap_ext[R];
  long long tap_stride[R];
};

template <typename T>
struct WeightWide {
  using type = double;
  static CC_DEVICE type zero() { return 0.0; }
  static CC_DEVICE type fma(double g, T v, type acc) {
    return cc::fma(g, static_cast<double>(v), acc);
  }
  template <typename Acc>
  static CC_DEVICE Acc narrow(type v) { return static_cast<Acc>(v); }
};
template <>
struct WeightWide<half> {
  using type = double;
  static CC_DEVICE type zero() { return 0.0; }
  static CC_DEVICE type fma(double g, half v, type acc) {
    return cc::fma(g, static_cast<double>(half_to_float(v)), acc);
  }
  template <typename Acc>
  static CC_DEVICE Acc narrow(type v) { return static_cast<Acc>(v); }
};
template <typename Real>
struct WeightWide<complex<Real> > {
  using type = complex<double>;
  static CC_DEVICE type zero() { return type{0.0, 0.0}; }
  static CC_DEVICE type fma(double g, complex<Real> v, type acc) {
    return type{cc::fma(g, static_cast<double>(v.re), acc.re),
                cc::fma(g, static_cast<double>(v.im), acc.im)};
  }
  template <typename Acc>
  static CC_DEVICE Acc narrow(type v) {
    return Acc{static_cast<Real>(v.re), static_cast<Real>(v.im)};
  }
};

}  // namespace cc

/// Launch: 1-D grid of any size (grid-stride), blocks of CUPYCONV_BLOCK_THREADS threads.
template <typename T, typename Acc, int R, typename Index>
__global__ void CUPYCONV_LAUNCH_BOUNDS
winograd_weights(const cc::WinogradWeights<R> p, const T* __restrict__ w,
                 const double* __restrict__ g, Acc* __restrict__ u) {
  static_assert(cc::IsIndexType<Index>::value, "Index must be int or long long");
  cc::require_block_shape();
  using Wide = cc::WeightWide<T>;
  const long long kc = p.K * p.cg;
  const long long total = p.positions * kc;
  for (long long t = cc::global_thread_id(); t < total; t += cc::global_thread_count()) {
    const Index pos = static_cast<Index>(t / kc);
    const Index j = static_cast<Index>(t - static_cast<long long>(pos) * kc);
    const Index k = j / static_cast<Index>(p.cg);
    const Index c = j - k * static_cast<Index>(p.cg);
    const T* __restrict__ wk = w + k * static_cast<Index>(p.stride_k)
                                 + c * static_cast<Index>(p.stride_c);
    const double* __restrict__ gp = g + static_cast<long long>(pos) * p.taps;
    typename Wide::type acc = Wide::zero();
    Index coord[R];
#pragma unroll
    for (int i = 0; i < R; ++i) coord[i] = 0;
    Index off = 0;
    for (Index tap = 0; tap < static_cast<Index>(p.taps); ++tap) {
      acc = Wide::fma(gp[tap], wk[off], acc);
#pragma unroll
      for (int i = R - 1; i >= 0; --i) {       // odometer, innermost tap axis fastest
        off += static_cast<Index>(p.tap_stride[i]);
        if (++coord[i] < static_cast<Index>(p.tap_ext[i])) break;
        off -= static_cast<Index>(p.tap_stride[i]) * static_cast<Index>(p.tap_ext[i]);
        coord[i] = 0;
      }
    }
    u[t] = Wide::template narrow<Acc>(acc);
  }
}
