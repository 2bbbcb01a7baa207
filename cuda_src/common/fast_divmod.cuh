// cupyconv: CUTLASS-style fast integer division by a runtime-invariant divisor.
//
// The multiplier and shift are computed ON THE HOST (cupyconv/_kernels/params.py,
// `fast_divmod_params`) and travel in the kernel's params struct, so a kernel
// never executes a hardware division in its hot loops.  For a divisor d > 1
// with l = ceil(log2 d):
//
//   32-bit: m32 = ceil(2^(31+l) / d),  q = umulhi(n, m32) >> (l-1),  valid for 0 <= n < 2^31
//   64-bit: m64 = ceil(2^(63+l) / d),  q = umul64hi(n, m64) >> (l-1), valid for 0 <= n < 2^63
//
// (error term e = m*d - 2^p < d, so n*e < 2^p and floor(n*m / 2^p) == n / d).
// d == 1 is special-cased (q = n).  Dividends must be non-negative.
#pragma once
#include "types.cuh"

namespace cc {

/// Host-computed divisor data; four `long long`s so host and device layouts match.
struct FastDivmodParams {
  long long divisor;  ///< d >= 1
  long long mul32;    ///< ceil(2^(31+l)/d) for the 32-bit path (0 when d == 1 or d >= 2^31)
  long long mul64;    ///< ceil(2^(63+l)/d) as a bit pattern (unsigned on the device)
  long long shift;    ///< l - 1 (0 when d == 1)
};

/// Division by a FastDivmodParams divisor for the index type `Index`.
template <typename Index>
struct FastDivmod;

template <>
struct FastDivmod<int> {
  int divisor;           ///< d
  unsigned multiplier;   ///< m32
  unsigned shift;        ///< l - 1

  CC_DEVICE FastDivmod() : divisor(1), multiplier(0u), shift(0u) {}
  CC_DEVICE explicit FastDivmod(const FastDivmodParams& p)
      : divisor(static_cast<int>(p.divisor)),
        multiplier(static_cast<unsigned>(p.mul32)),
        shift(static_cast<unsigned>(p.shift)) {}

  /// n / d for 0 <= n < 2^31.
  CC_DEVICE int div(int n) const {
    return divisor == 1 ? n
                        : static_cast<int>(__umulhi(static_cast<unsigned>(n), multiplier) >> shift);
  }
  /// q = n / d, r = n % d.
  CC_DEVICE void divmod(int n, int& q, int& r) const {
    q = div(n);
    r = n - q * divisor;
  }
};

template <>
struct FastDivmod<long long> {
  long long divisor;              ///< d
  unsigned long long multiplier;  ///< m64
  unsigned shift;                 ///< l - 1

  CC_DEVICE FastDivmod() : divisor(1), multiplier(0ull), shift(0u) {}
  CC_DEVICE explicit FastDivmod(const FastDivmodParams& p)
      : divisor(p.divisor),
        multiplier(static_cast<unsigned long long>(p.mul64)),
        shift(static_cast<unsigned>(p.shift)) {}

  /// n / d for 0 <= n < 2^63.
  CC_DEVICE long long div(long long n) const {
    return divisor == 1
               ? n
               : static_cast<long long>(
                     __umul64hi(static_cast<unsigned long long>(n), multiplier) >> shift);
  }
  /// q = n / d, r = n % d.
  CC_DEVICE void divmod(long long n, long long& q, long long& r) const {
    q = div(n);
    r = n - q * divisor;
  }
};

/// Splits `v`, a row-major index over R axes, into its per-axis coordinates by the
/// axes' divisors (the last axis fastest).
template <int R, typename Index>
CC_DEVICE void split_row_major(const FastDivmodParams (&div)[R], Index v, Index (&coord)[R]) {
#pragma unroll
  for (int i = R - 1; i >= 0; --i) {
    Index q;
    FastDivmod<Index>(div[i]).divmod(v, q, coord[i]);
    v = q;
  }
}

}  // namespace cc
