// cupyconv: tiled implicit-GEMM forward convolution for any spatial rank R.
//
// Per group g the convolution is the GEMM  Y_g[M x Kg] = A_g[M x Kr] * B_g[Kr x Kg]
//
//   M  = n_count * prod(O)   row m   = (n - n0) * prod(O) + o
//   Kg = K / G               col k   = output channel within the group
//   Kr = (C/G) * prod(KS)    index r = c * prod(KS) + tap
//   A[m, r] = x[n, g*C/G + c, o*stride - pad + dil*tap_eff]   (through the boundary remap)
//   B[r, k] = w[g*K/G + k, c, tap]
//
// A is never materialised: each CTA gathers its BM x BK slice of A straight
// from x (any strides, any padding mode) into shared memory, next to the
// BK x BN slice of B.  The CTA tile BM x BN is computed by CUPYCONV_BLOCK_THREADS
// threads (256, common/launch_config.cuh) laid out 16 x 16, each owning a
// TM x TN = (BM/16) x (BN/16) register block with rows tm + 16*i and columns
// tn + 16*j (conflict-free shared loads, coalesced channels-first stores).
// Shared memory is double buffered: the next K-slice is fetched into
// registers while the current one is multiplied, then stored to the other
// buffer; one __syncthreads per K-slice.
//
// Each thread keeps ONE A row (its m is fixed for the whole K loop, so its
// batch offset and base padded coordinates are computed once) and ONE B
// K-index per slice; the (c, tap) split of r uses host-computed fast divmod.
// Grid: x = ceil(M / BM), y = ceil(Kg / BN), z = groups of this launch (g0 + z).
#include "../platform.cuh"
#include "../common/conv_common.cuh"

template <typename T, typename Acc, int R, typename Index, int BM, int BN, int BK>
__global__ void CUPYCONV_LAUNCH_BOUNDS
implicit_gemm_fprop(const cc::ConvParams<R> p, const T* __restrict__ x, const T* __restrict__ w,
                    T* __restrict__ y, const T* __restrict__ bias) {
  // Types and tile geometry ---------------------------------------------------
  static_assert(cc::IsIndexType<Index>::value, "Index must be int or long long");
  constexpr int kThreads = cc::kBlockThreads;  // CUPYCONV_BLOCK_THREADS
  constexpr int kThreadsM = 16;
  constexpr int kThreadsN = kThreads / kThreadsM;
  constexpr int TM = BM / kThreadsM;             ///< rows per thread
  constexpr int TN = BN / kThreadsN;             ///< columns per thread
  constexpr int kARowsStep = kThreads / BM;      ///< A loader: k-rows covered per pass
  constexpr int kAPerThread = BK / kARowsStep;   ///< A elements fetched per thread per slice
  constexpr int kBColsStep = kThreads / BK;      ///< B loader: columns covered per pass
  constexpr int kBPerThread = BN / kBColsStep;   ///< B elements fetched per thread per slice
  static_assert(BM % kThreadsM == 0 && BN % kThreadsN == 0, "Require BM, BN multiples of 16");
  static_assert(kThreads % BM == 0 && BK % kARowsStep == 0, "Require BM | threads and (threads/BM) | BK");
  static_assert(kThreads % BK == 0 && BN % kBColsStep == 0, "Require BK | threads and (threads/BK) | BN");
  static_assert(2 * BK * (BM + BN) * sizeof(Acc) <= 48 * 1024, "Tile exceeds 48 KiB of static shared memory");

  cc::require_block_shape();
  __shared__ Acc smem_a[2][BK][BM];
  __shared__ Acc smem_b[2][BK][BN];

  const int tid = static_cast<int>(threadIdx.x);
  const Index g = static_cast<Index>(p.g0) + static_cast<Index>(blockIdx.z);
  const Index M = static_cast<Index>(p.gemm_m);
  const Index Kr = static_cast<Index>(p.gemm_k);
  const Index Kg = static_cast<Index>(p.kpg);
  const Index block_m = static_cast<Index>(blockIdx.x) * BM;
  const Index block_n = static_cast<Index>(blockIdx.y) * BN;
  const cc::FastDivmod<Index> div_taps(p.div_taps);
  const T cval = cc::make_scalar<T>(p.cval_re, p.cval_im);

  // A loader state: fixed row, per-slice k-rows a_k + kARowsStep * j ------------
  const int a_m = tid % BM;
  const int a_k = tid / BM;
  const bool a_valid = block_m + a_m < M;
  Index a_base[R];
  Index a_x_n = 0;
  {
    cc::OutputPosition<R, Index> pos;
    pos.set(p, a_valid ? block_m + a_m : Index(0));
#pragma unroll
    for (int i = 0; i < R; ++i) {
      a_base[i] = pos.coord[i] * static_cast<Index>(p.stride[i]) - static_cast<Index>(p.pad_before[i]);
    }
    a_x_n = pos.n * static_cast<Index>(p.x_stride_n) + g * static_cast<Index>(p.cpg) * static_cast<Index>(p.x_stride_c);
  }

  // B loader state: fixed k-row b_k, columns b_n + kBColsStep * j ----------------
  const int b_k = tid % BK;
  const int b_n = tid / BK;
  const Index w_g = g * Kg * static_cast<Index>(p.w_stride_k);

  Acc frag_a[kAPerThread];
  Acc frag_b[kBPerThread];

  auto fetch = [&](Index k0) {
#pragma unroll
    for (int j = 0; j < kAPerThread; ++j) {
      const Index r = k0 + a_k + kARowsStep * j;
      Acc v = cc::zero<Acc>();
      if (a_valid && r < Kr) {
        Index c, tap;
        div_taps.divmod(r, c, tap);
        Index kappa[R];
        cc::split_tap(p, tap, kappa);
        v = cc::to_accum<Acc>(cc::gather_input(p, x, a_x_n + c * static_cast<Index>(p.x_stride_c),
                                               a_base, kappa, cval));
      }
      frag_a[j] = v;
    }
    const Index r = k0 + b_k;
    Index w_r = 0;
    const bool r_ok = r < Kr;
    if (r_ok) {
      Index c, tap;
      div_taps.divmod(r, c, tap);
      Index kappa[R];
      cc::split_tap(p, tap, kappa);
      w_r = w_g + c * static_cast<Index>(p.w_stride_c);
#pragma unroll
      for (int i = 0; i < R; ++i) w_r += kappa[i] * static_cast<Index>(p.w_stride[i]);
    }
#pragma unroll
    for (int j = 0; j < kBPerThread; ++j) {
      const Index col = block_n + b_n + kBColsStep * j;
      frag_b[j] = (r_ok && col < Kg)
                      ? cc::to_accum<Acc>(w[w_r + col * static_cast<Index>(p.w_stride_k)])
                      : cc::zero<Acc>();
    }
  };
  auto stash = [&](int buf) {
#pragma unroll
    for (int j = 0; j < kAPerThread; ++j) smem_a[buf][a_k + kARowsStep * j][a_m] = frag_a[j];
#pragma unroll
    for (int j = 0; j < kBPerThread; ++j) smem_b[buf][b_k][b_n + kBColsStep * j] = frag_b[j];
  };

  // Main loop ---------------------------------------------------------------
  const int tm = tid % kThreadsM;
  const int tn = tid / kThreadsM;
  Acc acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = cc::zero<Acc>();

  const Index k_tiles = (Kr + BK - 1) / BK;
  fetch(Index(0));
  stash(0);
  __syncthreads();
  for (Index kt = 0; kt < k_tiles; ++kt) {
    const int buf = static_cast<int>(kt & 1);
    const bool has_next = kt + 1 < k_tiles;
    if (has_next) fetch((kt + 1) * BK);  // global loads overlap the FMAs below
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      Acc a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = smem_a[buf][kk][tm + kThreadsM * i];
#pragma unroll
      for (int j = 0; j < TN; ++j) b[j] = smem_b[buf][kk][tn + kThreadsN * j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = cc::fma(a[i], b[j], acc[i][j]);
    }
    if (has_next) stash(buf ^ 1);
    __syncthreads();
  }

  // Epilogue ----------------------------------------------------------------
  const cc::Epilogue<T, Acc> epilogue(p);
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const Index m = block_m + tm + kThreadsM * i;
    if (m >= M) continue;
    cc::OutputPosition<R, Index> pos;
    pos.set(p, m);
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const Index col = block_n + tn + kThreadsN * j;
      if (col < Kg) {
        const Index k = g * Kg + col;
        epilogue(y, pos.y_offset(p, k), bias, k, acc[i][j]);
      }
    }
  }
}
