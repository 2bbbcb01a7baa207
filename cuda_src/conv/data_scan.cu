// cupyconv: the one-flag data scan of a call's operands, any rank R.
//
// One launch reads up to three operands of one element type T (the activation, the
// filter, the output gradient: whichever the call has) and writes one small result,
// which the host reads back with ONE device-to-host copy:
//
//   out[0]      bit i set: operand i holds a NaN, +Inf or -Inf (never set for integers);
//   out[1 + i]  max |a| over operand i's elements: for integer T the magnitude as an
//               unsigned 64-bit integer (|INT64_MIN| = 2^63 fits), for floating T the
//               bits of the largest finite magnitude as a binary64 (non-negative
//               doubles order as their bits); complex: the larger of |re| and |im|.
//
// `out` must be zeroed before the launch (the program allocates it zeroed): each block
// folds its threads' results in shared memory, then thread 0 merges them into `out`
// with one atomicOr / atomicMax per word.
//
// Operand i has `count[i]` elements (0: absent, its pointer unused) laid out as
// `dims[i]` axes, innermost first: extent shape[i][d], element stride stride[i][d] (any
// sign).  The host merges the axes that are contiguous with each other, so a
// contiguous operand (any rank) is one axis and its elements are read with no
// division; R only sizes the struct (R + 2 axes: N, C and the spatial axes).
#include "../platform.cuh"
#include "../common/conv_common.cuh"

namespace cc {

/// Host mirror: cupyconv/_kernels/scan_launch.py (scan_params_dtype); every field 8 bytes.
template <int R>
struct ScanParams {
  long long count[3];             ///< elements of each operand (0: absent)
  long long dims[3];              ///< axes in use per operand (innermost first), >= 1
  long long shape[3][R + 2];      ///< extents, innermost first
  long long stride[3][R + 2];     ///< element strides, innermost first
};

/// Folds one binary64 value: non-finite sets `bad`, else its magnitude bits raise `mag`.
CC_DEVICE void scan_real(double v, bool& bad, unsigned long long& mag) {
  const unsigned long long bits =
      static_cast<unsigned long long>(__double_as_longlong(v)) & 0x7fffffffffffffffULL;
  if (bits >= 0x7ff0000000000000ULL) {
    bad = true;                   // exponent all ones: Inf or NaN
  } else if (bits > mag) {
    mag = bits;
  }
}

template <typename T>
struct ScanElement {
  static CC_DEVICE void fold(T v, bool& bad, unsigned long long& mag) {
    scan_real(static_cast<double>(v), bad, mag);
  }
};
template <>
struct ScanElement<half> {
  static CC_DEVICE void fold(half v, bool& bad, unsigned long long& mag) {
    scan_real(static_cast<double>(half_to_float(v)), bad, mag);
  }
};
template <>
struct ScanElement<bfloat16> {
  static CC_DEVICE void fold(bfloat16 v, bool& bad, unsigned long long& mag) {
    scan_real(static_cast<double>(bfloat16_to_float(v)), bad, mag);
  }
};
template <typename Real>
struct ScanElement<complex<Real> > {
  static CC_DEVICE void fold(complex<Real> v, bool& bad, unsigned long long& mag) {
    scan_real(static_cast<double>(v.re), bad, mag);
    scan_real(static_cast<double>(v.im), bad, mag);
  }
};
template <>
struct ScanElement<long long> {
  static CC_DEVICE void fold(long long v, bool&, unsigned long long& mag) {
    const unsigned long long u = static_cast<unsigned long long>(v);
    const unsigned long long m = v < 0 ? 0ULL - u : u;
    if (m > mag) mag = m;
  }
};

}  // namespace cc

/// Launch: 1-D grid of any size (grid-stride), blocks of CUPYCONV_BLOCK_THREADS threads.
template <typename T, int R, typename Index>
__global__ void CUPYCONV_LAUNCH_BOUNDS
data_scan(const cc::ScanParams<R> p, const T* __restrict__ a0, const T* __restrict__ a1,
          const T* __restrict__ a2, unsigned long long* __restrict__ out) {
  static_assert(cc::IsIndexType<Index>::value, "Index must be int or long long");
  cc::require_block_shape();
  CUPYCONV_STATIC_SHARED(unsigned long long, s_out, [4]);   // poisoned per block when emulated
  if (threadIdx.x < 4) s_out[threadIdx.x] = 0ULL;
  __syncthreads();
  const T* const arrays[3] = {a0, a1, a2};
#pragma unroll
  for (int op = 0; op < 3; ++op) {
    const long long n = p.count[op];
    const int dims = static_cast<int>(p.dims[op]);
    const T* __restrict__ a = arrays[op];
    bool bad = false;
    unsigned long long mag = 0ULL;
    for (long long t = cc::global_thread_id(); t < n; t += cc::global_thread_count()) {
      Index rem = static_cast<Index>(t);
      Index off = 0;
      for (int d = 0; d + 1 < dims; ++d) {
        const Index extent = static_cast<Index>(p.shape[op][d]);
        const Index q = rem / extent;
        off += (rem - q * extent) * static_cast<Index>(p.stride[op][d]);
        rem = q;
      }
      off += rem * static_cast<Index>(p.stride[op][dims - 1]);
      cc::ScanElement<T>::fold(a[off], bad, mag);
    }
    if (bad) atomicOr(&s_out[0], 1ULL << op);
    if (mag) atomicMax(&s_out[1 + op], mag);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (s_out[0]) atomicOr(&out[0], s_out[0]);
#pragma unroll
    for (int op = 0; op < 3; ++op) {
      if (s_out[1 + op]) atomicMax(&out[1 + op], s_out[1 + op]);
    }
  }
}
