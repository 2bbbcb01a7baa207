// cupyconv: padding modes resolved in index math (numpy.pad semantics).
//
// A padded coordinate q on an axis of extent S maps to a source index:
//
//   constant  : outside [0, S) -> "outside" (the kernel substitutes cval)
//   edge      : clamp to [0, S-1]
//   wrap      : q mod S                                   (period S)
//   symmetric : m = q mod 2S;   m < S ? m : 2S-1-m        (period 2S, edge repeated)
//   reflect   : m = q mod 2S-2; m < S ? m : 2S-2-m        (period 2S-2, edge not
//               repeated; S == 1 maps everything to 0)
//
// The periodic forms equal numpy's repeated reflection for pads larger than
// the axis.  `AxisPreimages` enumerates the inverse map for the gather-form
// adjoint (col2vol): every (tap, output) pair of one axis that reads source s.
#pragma once
#include "types.cuh"

namespace cc {

/// Boundary modes; values match cupyconv/_kernels/params.py PAD_MODES.
enum PadMode : int {
  kPadConstant = 0,
  kPadReflect = 1,
  kPadSymmetric = 2,
  kPadWrap = 3,
  kPadEdge = 4,
};

/// Floor division for b > 0 and any a.
template <typename Index>
CC_DEVICE Index floor_div(Index a, Index b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/// Non-negative remainder for m > 0.
template <typename Index>
CC_DEVICE Index floor_mod(Index a, Index m) {
  Index r = a % m;
  return r < 0 ? r + m : r;
}

/// Maps the padded coordinate `q` (in place) onto [0, S).  Returns false
/// when the element lies in the constant-mode padding.
template <typename Index>
CC_DEVICE bool remap_coord(Index& q, Index S, int mode) {
  if (q >= 0 && q < S) return true;
  switch (mode) {
    case kPadConstant:
      return false;
    case kPadEdge:
      q = q < 0 ? Index(0) : S - 1;
      return true;
    case kPadWrap:
      q = floor_mod(q, S);
      return true;
    case kPadSymmetric: {
      const Index m = floor_mod(q, Index(2) * S);
      q = m < S ? m : Index(2) * S - 1 - m;
      return true;
    }
    default: {  // kPadReflect
      if (S == 1) {
        q = 0;
        return true;
      }
      const Index period = Index(2) * S - 2;
      const Index m = floor_mod(q, period);
      q = m < S ? m : period - m;
      return true;
    }
  }
}

/// Enumerates, for one axis, every (kappa, o) pair with
/// remap(o*stride - pad_before + dilation*kappa_eff) == s, in increasing
/// (kappa, o) order, where kappa is the WEIGHT tap index and kappa_eff is
/// K-1-kappa when the kernel is flipped.
template <typename Index>
struct AxisPreimages {
  // Geometry ----------------------------------------------------------------
  Index s;        ///< source index on this axis
  Index S;        ///< input extent
  Index K;        ///< kernel extent
  Index O;        ///< output extent
  Index stride;   ///< output stride
  Index dil;      ///< dilation
  Index pb;       ///< padding before
  bool flip;      ///< true convolution (taps reversed)
  bool interval;  ///< preimage of s is one interval (constant, edge, S == 1)
  Index lo, hi;   ///< interval bounds (interval modes)
  bool lo_open;   ///< interval extends to -infinity
  bool hi_open;   ///< interval extends to +infinity
  Index period;   ///< period of the padded extension (periodic modes)
  Index r1, r2;   ///< residues of the preimages modulo period
  // State -------------------------------------------------------------------
  Index kappa;    ///< current weight tap
  Index o;        ///< current output index
  Index o_hi;     ///< last output index of the current run (interval modes)
  Index q;        ///< current padded coordinate (periodic modes)

  CC_DEVICE void init(Index s_, Index S_, Index K_, Index O_, Index stride_, Index dil_,
                      Index pb_, bool flip_, int mode) {
    s = s_; S = S_; K = K_; O = O_; stride = stride_; dil = dil_; pb = pb_; flip = flip_;
    lo = hi = s; lo_open = hi_open = false;
    period = 1; r1 = r2 = 0;
    interval = (mode == kPadConstant) || (mode == kPadEdge) || (S == 1);
    if (mode != kPadConstant && S == 1) {
      lo_open = hi_open = true;
    } else if (mode == kPadEdge) {
      lo_open = (s == 0);
      hi_open = (s == S - 1);
    } else if (mode == kPadWrap) {
      period = S; r1 = r2 = s;
    } else if (mode == kPadSymmetric) {
      period = Index(2) * S; r1 = s; r2 = Index(2) * S - 1 - s;
    } else if (mode == kPadReflect) {
      period = Index(2) * S - 2; r1 = s; r2 = floor_mod(period - s, period);
    }
  }

  /// Padded coordinate of output 0 for weight tap `k`.
  CC_DEVICE Index offset(Index k) const { return dil * (flip ? K - 1 - k : k) - pb; }

  /// Positions on the first pair; false when the axis has none.
  CC_DEVICE bool first() {
    kappa = 0;
    return seek_kappa();
  }

  /// Advances to the next pair; false when exhausted.
  CC_DEVICE bool next() {
    if (interval) {
      if (o < o_hi) {
        ++o;
        return true;
      }
    } else if (advance_periodic()) {
      return true;
    }
    ++kappa;
    return seek_kappa();
  }

 private:
  CC_DEVICE bool seek_kappa() {
    for (; kappa < K; ++kappa) {
      if (start_kappa()) return true;
    }
    return false;
  }

  CC_DEVICE bool start_kappa() {
    const Index off = offset(kappa);
    const Index qmax = (O - 1) * stride + off;
    if (interval) {
      const Index a = lo_open ? off : (lo > off ? lo : off);
      const Index b = hi_open ? qmax : (hi < qmax ? hi : qmax);
      if (a > b) return false;
      o = (a - off + stride - 1) / stride;
      o_hi = (b - off) / stride;
      return o <= o_hi;
    }
    q = off - 1;
    return advance_periodic();
  }

  /// Smallest padded coordinate > q that maps to s and is hit by an output.
  CC_DEVICE bool advance_periodic() {
    const Index off = offset(kappa);
    const Index qmax = (O - 1) * stride + off;
    for (;;) {
      const Index c1 = q + 1 + floor_mod(r1 - (q + 1), period);
      const Index c2 = q + 1 + floor_mod(r2 - (q + 1), period);
      q = c1 < c2 ? c1 : c2;
      if (q > qmax) return false;
      const Index rel = q - off;
      if (rel % stride == 0) {
        o = rel / stride;
        return true;
      }
    }
  }
};

}  // namespace cc
