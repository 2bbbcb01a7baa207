// cupyconv: the parameter struct shared by every convolution kernel family.
//
// One struct per spatial rank R.  Every field is `long long` or `double`
// (FastDivmodParams is four `long long`s), so the struct has no padding and
// the host builds it as a numpy structured scalar (align=True) with the same
// layout: cupyconv/_kernels/params.py mirrors this file field by field, and
// CuPy passes the scalar by value as the kernel's first argument.
//
// Logical view is channels-first: x (N, C, *S), w (K, C/G, *KS), y (N, K, *O).
// Layout only changes the element strides below, which may be negative or
// zero (flipped views, broadcast weights).
#pragma once
#include "types.cuh"
#include "fast_divmod.cuh"

#ifndef CUPYCONV_MAX_RANK
#define CUPYCONV_MAX_RANK 8
#endif

namespace cc {

template <int R>
struct ConvParams {
  static_assert(R >= 1 && R <= CUPYCONV_MAX_RANK, "spatial rank must be in [1, CUPYCONV_MAX_RANK]");

  // Problem ------------------------------------------------------------------
  long long N;                ///< batch size
  long long C;                ///< input channels
  long long K;                ///< output channels
  long long G;                ///< groups
  long long cpg;              ///< input channels per group, C / G
  long long kpg;              ///< output channels per group, K / G
  long long in_ext[R];        ///< spatial input extents S
  long long k_ext[R];         ///< spatial kernel extents KS
  long long out_ext[R];       ///< spatial output extents O
  long long stride[R];        ///< output stride per axis
  long long dilation[R];      ///< kernel dilation per axis
  long long pad_before[R];    ///< leading padding per axis (trailing is implied by O)
  // Strides in elements ------------------------------------------------------
  long long x_stride_n;       ///< x batch stride
  long long x_stride_c;       ///< x channel stride
  long long x_stride[R];      ///< x spatial strides
  long long w_stride_k;       ///< w output-channel stride
  long long w_stride_c;       ///< w input-channel stride
  long long w_stride[R];      ///< w spatial strides
  long long y_stride_n;       ///< y batch stride
  long long y_stride_k;       ///< y channel stride
  long long y_stride[R];      ///< y spatial strides
  long long bias_stride;      ///< bias element stride
  long long has_bias;         ///< 1 when the bias pointer is valid
  // Modes ----------------------------------------------------------------
  long long pad_mode;         ///< cc::PadMode
  long long flip;             ///< 1: true convolution (taps reversed); 0: correlation
  // Work decomposition --------------------------------------------------------
  long long n0;               ///< first batch index of this launch
  long long n_count;          ///< batch indices in this launch
  long long g0;               ///< first group of this launch (blockIdx.z offset)
  long long in_size;          ///< prod(S)
  long long taps;             ///< prod(KS)
  long long out_size;         ///< prod(O)
  long long gemm_k;           ///< cpg * taps (reduction length)
  long long gemm_m;           ///< n_count * out_size (GEMM rows of this launch)
  // Fast divisors ----------------------------------------------------------
  FastDivmodParams div_in[R];      ///< by in_ext[i]
  FastDivmodParams div_k[R];       ///< by k_ext[i]
  FastDivmodParams div_out[R];     ///< by out_ext[i]
  FastDivmodParams div_in_size;    ///< by in_size
  FastDivmodParams div_taps;       ///< by taps
  FastDivmodParams div_out_size;   ///< by out_size
  FastDivmodParams div_C;          ///< by C
  FastDivmodParams div_kpg;        ///< by kpg
  FastDivmodParams div_grid[3];    ///< family-specific launch-grid divisors
  long long aux[4];                ///< family-specific launch data (direct_conv: tap chunk h, w, row pitch)
  // Scalars ----------------------------------------------------------------
  double cval_re;             ///< constant-mode fill value, real part
  double cval_im;             ///< constant-mode fill value, imaginary part
  double alpha_re;            ///< epilogue y = alpha*acc + beta*y (+ bias)
  double alpha_im;            ///< alpha, imaginary part
  double beta_re;             ///< beta, real part (beta == 0: y is not read)
  double beta_im;             ///< beta, imaginary part
};

/// Number of 8-byte words in ConvParams<R>; params.py asserts the same count.
CC_CONSTEXPR int conv_params_words(int R) { return 6 + 6 * R + 3 * (2 + R) + 2 + 2 + 8 + 4 * (3 * R + 8) + 4 + 6; }

static_assert(sizeof(ConvParams<1>) == 8 * conv_params_words(1), "ConvParams<1> must have no padding");
static_assert(sizeof(ConvParams<8>) == 8 * conv_params_words(8), "ConvParams<8> must have no padding");
static_assert(sizeof(ConvParams<8>) <= 4096, "ConvParams must fit the 4 KiB kernel-parameter limit");

}  // namespace cc
