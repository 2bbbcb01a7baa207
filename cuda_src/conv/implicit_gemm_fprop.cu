// cupyconv: tiled implicit-GEMM forward convolution for any spatial rank R.
//
// Per group g the convolution is the GEMM  Y_g[M x Kg] = A_g[M x Kr] * B_g[Kr x Kg]
//
//   M  = n_count * prod(O)   row m   = (n - n0) * prod(O) + o
//   Kg = K / G               col k   = output channel within the group
//   Kr = prod(KS) * (C/G)    index r = tap * (C/G) + c        (GEMM-K ordered (tap, channel))
//   A[m, r] = x[n, g*C/G + c, o*stride - pad + dil*tap_eff]   (through the boundary remap)
//   B[r, k] = w[g*K/G + k, c, tap]
//
// A is never materialised: each CTA gathers its BM x BK slice of A straight from x
// (any strides, any padding mode) into shared memory, next to the BK x BN slice of B.
//
// Gather (CUTLASS's "optimized" iterator, per thread).  Each loader thread keeps ONE
// A row m (batch offset and base padded coordinates computed once) and walks GEMM-K
// with a (tap, channel) cursor: consecutive k differ by one channel, so the element
// address is tap_offset + c * stride_c with no division and no boundary switch; the
// tap offset (R remaps through the padding mode) is recomputed only when the cursor
// crosses to the next tap.  The B loader does the same for the weights.
//
// Variants (kVariant): 0 general; 1 tap-aligned (the host picks it when C/G % BK == 0): every
// K-slice lies in one tap, so the K loop is two loops, taps outside (the boundary
// remap of A and the weight-tap offset once per tap, out of line) and channel slices
// inside; the inner (hot) loop has no remap, no cursor, no K bound check.  These
// tiles are compiled for two resident CTAs per SM (__launch_bounds__ min 2); 2 tap-aligned
// with tensor-core math, the atom of the storage type (cc::MmaAtomFor): float64
// MmaF64_m8n8k4 (DMMA), float32 MmaTf32_m16n8k8 (HMMA; only under precision="tf32"),
// float16 MmaF16_m16n8k16 (HMMA, float accumulation).  8 warps as 2 x 4, each a
// (BM/2) x (BN/4) warp tile of atoms.  Operands are staged in shared memory in the
// atom's element type (tf32 rounded once at staging, half as half) and read through
// the atom's (lane, i) -> (row, col) maps, or for f16 with ldmatrix.trans (the slices
// are k-major, so .trans hands each lane the (m, k) pairs the fragment wants).  The
// A rows are padded by 16 bytes (32 for double) so the fragment reads are bank-conflict
// free.  The host picks it on sm_80+ devices (below sm_80 it compiles and traps).
// 3: variant 2 on channels-last operands (x_stride_c == w_stride_c == 1, strides and
// addresses 16-byte aligned: the host checks): slices staged k-contiguous, [m][k] and
// [n][k], one 16-byte cp.async of A and one of B per thread, f16 fragments by ldmatrix
// without .trans.
//
// Math.  CUPYCONV_BLOCK_THREADS (256) threads laid out 16 x 16, each owning a
// TM x TN = (BM/16) x (BN/16) register block of CONTIGUOUS rows tm*TM.. and columns
// tn*TN..: per k the fragments are read with 16-byte vector loads (LDS.128).  The B
// tile's rows are padded by 4 elements so the loaders' stores are bank-conflict free.
// Shared memory is double buffered: the next K-slice is fetched into registers while
// the current one is multiplied, then stored to the other buffer; one
// __syncthreads per K-slice.  The float64 and TF32 tensor-core tiles, and every
// channels-last one, instead copy their slices global -> shared with cp.async, 3 slices
// in flight (kAsync below).
// The epilogue fuses alpha, beta and the bias.
// Grid: x = ceil(M / BM), y = ceil(Kg / BN), z = groups of this launch (g0 + z).
#include "implicit_gemm_parts.cuh"

template <typename T, typename Acc, int R, typename Index, int BM, int BN, int BK, int kVariant>
__global__ void CUPYCONV_LAUNCH_BOUNDS_MIN((kVariant >= 1 && sizeof(Index) == 4 && sizeof(Acc) == 4) ? 2 : 1)
implicit_gemm_fprop(const __grid_constant__ cc::ConvParams<R> p, const T* __restrict__ x, const T* __restrict__ w,
                    T* __restrict__ y, const T* __restrict__ bias) {
  // Types and tile geometry ---------------------------------------------------
  static_assert(cc::IsIndexType<Index>::value, "Index must be int or long long");
  constexpr int kThreads = cc::kBlockThreads;    ///< CUPYCONV_BLOCK_THREADS
  constexpr int kThreadsM = 16;
  constexpr int kThreadsN = kThreads / kThreadsM;
  constexpr int TM = BM / kThreadsM;             ///< contiguous rows per thread
  constexpr int TN = BN / kThreadsN;             ///< contiguous columns per thread
  constexpr int kARowsStep = kThreads / BM;      ///< A loader: k-rows covered per pass
  constexpr int kAPerThread = BK / kARowsStep;   ///< A elements fetched per thread per slice
  constexpr int kBColsStep = kThreads / BK;      ///< B loader: columns covered per pass
  constexpr int kBPerThread = BN / kBColsStep;   ///< B elements fetched per thread per slice
  static_assert(BM % kThreadsM == 0 && BN % kThreadsN == 0, "Require BM, BN multiples of 16");
  static_assert(kThreads % BM == 0 && BK % kARowsStep == 0, "Require BM | threads and (threads/BM) | BK");
  static_assert(kThreads % BK == 0 && BN % kBColsStep == 0, "Require BK | threads and (threads/BK) | BN");
  static_assert(kVariant >= 0 && kVariant <= 3,
                "kVariant is 0 (general), 1 (tap-aligned), 2 (tensor cores) or 3 (tensor cores, channels-last)");
  constexpr bool kAligned = kVariant >= 1;
  constexpr bool kMma = kVariant >= 2;
  /// channels-last operands (x_stride_c == w_stride_c == 1, 16-byte aligned: the host
  /// checks): slices are staged k-contiguous, [m][k] and [n][k], by 16-byte cp.async
  constexpr bool kNhwc = kVariant == 3;
  using Atom = typename cc::MmaAtomFor<T>::type;
  static_assert(!kMma || cc::MmaAtomFor<T>::kDefined, "tensor cores take float64, float32 (tf32) or float16");
  static_assert(!kMma || sizeof(Acc) == sizeof(typename Atom::CElement), "the atom accumulates in Acc");
  /// shared-memory element: the atom's operand type (tensor cores), else the accumulator
  using S = typename cc::Conditional<kMma, typename Atom::AElement, Acc>::type;
  constexpr bool kTf32 = kMma && sizeof(T) == 4;
  constexpr bool kLdmatrix = kMma && sizeof(S) == 2;      ///< f16 fragments through ldmatrix
  constexpr int kPadA = kMma ? (sizeof(S) == 8 ? 4 : 16 / static_cast<int>(sizeof(S))) : 0;
  constexpr int kPadB = sizeof(S) == 2 ? 8 : 4;           ///< B row padding: conflict-free (16-byte rows)
  /// The tensor-core tiles whose staged element is the operand itself (float64, TF32; all
  /// of them channels-last) stage with cp.async, kStages - 1 slices in flight; float16
  /// channels-first (2-byte gather, below cp.async's 4) and the FMA tiles go through
  /// registers, double buffered.
  constexpr bool kAsync = kMma && sizeof(S) == sizeof(T) && (kNhwc || sizeof(T) >= 4);
  constexpr int kChunk = 16 / static_cast<int>(sizeof(S));    ///< elements per 16-byte copy
  constexpr int kChunksK = kNhwc ? BK / kChunk : 1;            ///< 16-byte copies per slice row
  static_assert(!kNhwc || BK % kChunk == 0, "channels-last slices are whole 16-byte copies");
  // smem_a / smem_b: [stage][k][m or n] (k-major), or [stage][m or n][k] channels-last
  constexpr int kARows = kNhwc ? BM : BK, kACols = kNhwc ? BK + kPadA : BM + kPadA;
  constexpr int kBRows = kNhwc ? BN : BK, kBCols = kNhwc ? BK + kPadA : BN + kPadB;
  constexpr int kStageBytes = (kARows * kACols + kBRows * kBCols) * static_cast<int>(sizeof(S));
  constexpr int kStages = !kAsync ? 2 : (4 * kStageBytes <= 48 * 1024 ? 4 : 3);
  static_assert(kStages * kStageBytes <= 48 * 1024, "Tile exceeds 48 KiB of static shared memory");

  cc::require_block_shape();
  CUPYCONV_STATIC_SHARED(S, smem_a, [kStages][kARows][kACols]);  // 16-byte aligned; poisoned per block when emulated
  CUPYCONV_STATIC_SHARED(S, smem_b, [kStages][kBRows][kBCols]);

  const int tid = static_cast<int>(threadIdx.x);
  const Index g = static_cast<Index>(p.g0) + static_cast<Index>(blockIdx.z);
  const Index M = static_cast<Index>(p.gemm_m);
  const Index Kr = static_cast<Index>(p.gemm_k);
  const Index Kg = static_cast<Index>(p.kpg);
  const Index cpg = static_cast<Index>(p.cpg);
  const Index block_m = static_cast<Index>(blockIdx.x) * BM;
  const Index block_n = static_cast<Index>(blockIdx.y) * BN;
  const T cval = cc::make_scalar<T>(p.cval_re, p.cval_im);
  const Index x_stride_c = static_cast<Index>(p.x_stride_c);
  const Index w_stride_c = static_cast<Index>(p.w_stride_c);
  const Index w_stride_k = static_cast<Index>(p.w_stride_k);

  // A loader: fixed row a_m; k-rows a_k + kARowsStep * j of each slice (channels-last:
  // the a_k-th 16-byte copy of row a_m; threads past the tile's copies idle) ---------
  const int a_m = kNhwc ? tid / kChunksK : tid % BM;
  const int a_k = kNhwc ? tid % kChunksK : tid / BM;
  const bool a_row = !kNhwc || a_m < BM;
  const bool a_valid = a_row && block_m + a_m < M;
  Index a_base[R];
  Index a_x_n = 0;
  {
    cc::OutputPosition<R, Index> pos;
    pos.set(p, a_valid ? block_m + a_m : Index(0));
#pragma unroll
    for (int i = 0; i < R; ++i) {
      a_base[i] = pos.coord[i] * static_cast<Index>(p.stride[i]) - static_cast<Index>(p.pad_before[i]);
    }
    a_x_n = pos.n * static_cast<Index>(p.x_stride_n) + g * cpg * x_stride_c;
  }
  cc::TapChannel<Index> a_cur{0, static_cast<Index>(a_k)};   // position of k0 + a_k
  a_cur.advance(0, cpg);
  Index a_tap = -1, a_off = 0;
  bool a_inside = false;

  // B loader: fixed k-row b_k; columns b_n + kBColsStep * j (channels-last: the b_k-th
  // 16-byte copy of column b_n) ---------------------------------------------------
  const int b_k = kNhwc ? tid % kChunksK : tid % BK;
  const int b_n = kNhwc ? tid / kChunksK : tid / BK;
  const Index w_g = g * Kg * w_stride_k;
  cc::TapChannel<Index> b_cur{0, static_cast<Index>(b_k)};
  b_cur.advance(0, cpg);
  Index b_tap = -1, b_off = 0;

  S frag_a[kAPerThread];
  S frag_b[kBPerThread];

  auto fetch = [&](Index k0) {
    cc::TapChannel<Index> cur = a_cur;
#pragma unroll
    for (int j = 0; j < kAPerThread; ++j) {
      if (j > 0) cur.advance(kARowsStep, cpg);
      const Index r = k0 + a_k + kARowsStep * j;
      S v = cc::zero<S>();
      if (a_valid && r < Kr) {
        if (cur.tap != a_tap) {                   // crossed to another tap: one remap
          a_tap = cur.tap;
          const cc::TapOffset<Index> t = cc::gather_tap_offset(p, a_base, a_x_n, a_tap);
          a_off = t.off;
          a_inside = t.inside;
        }
        v = cc::to_stage<S, kTf32>(a_inside ? x[a_off + cur.c * x_stride_c] : cval);
      }
      frag_a[j] = v;
    }
    const Index r = k0 + b_k;
    const bool r_ok = r < Kr;
    if (r_ok && b_cur.tap != b_tap) {
      b_tap = b_cur.tap;
      b_off = cc::weight_tap_offset(p, w_g, b_tap);
    }
    const Index w_r = b_off + b_cur.c * w_stride_c;
#pragma unroll
    for (int j = 0; j < kBPerThread; ++j) {
      const Index col = block_n + b_n + kBColsStep * j;
      frag_b[j] = (r_ok && col < Kg) ? cc::to_stage<S, kTf32>(w[w_r + col * w_stride_k]) : cc::zero<S>();
    }
    a_cur.advance(BK, cpg);                       // cursors to the next slice
    b_cur.advance(BK, cpg);
  };
  auto stash = [&](int buf) {
#pragma unroll
    for (int j = 0; j < kAPerThread; ++j) smem_a[buf][a_k + kARowsStep * j][a_m] = frag_a[j];
#pragma unroll
    for (int j = 0; j < kBPerThread; ++j) smem_b[buf][b_k][b_n + kBColsStep * j] = frag_b[j];
  };

  // Math on one shared slice -------------------------------------------------
  const int tm = tid % kThreadsM;
  const int tn = tid / kThreadsM;
  Acc acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = cc::zero<Acc>();
  // tensor-core layout (kMma): warps 2 x 4, warp tile WM x WN of AM x AN atoms
  constexpr int kWarpsM = 2;
  constexpr int kWarpsN = kThreads / 32 / kWarpsM;
  constexpr int WM = BM / kWarpsM, WN = BN / kWarpsN;
  constexpr int AM = kMma ? WM / Atom::kM : 1, AN = kMma ? WN / Atom::kN : 1;
  static_assert(!kMma || (WM % Atom::kM == 0 && WN % Atom::kN == 0 && BK % Atom::kK == 0),
                "tensor-core tile must be whole atoms");
  const int lane = tid & 31;
  const int wm0 = ((tid >> 5) % kWarpsM) * WM, wn0 = ((tid >> 5) / kWarpsM) * WN;
  typename Atom::FragC macc[AM][AN];
#pragma unroll
  for (int i = 0; i < AM; ++i)
#pragma unroll
    for (int j = 0; j < AN; ++j)
#pragma unroll
      for (int e = 0; e < Atom::kCRegs; ++e) macc[i][j][e] = cc::zero<typename Atom::CRegister>();
  auto mma_slice = [&](int buf) {
    if constexpr (kMma) {
      if constexpr (cc::kHasMma) {
#pragma unroll
        for (int kk = 0; kk < BK; kk += Atom::kK) {
          typename Atom::FragA af[AM];
          typename Atom::FragB bf[AN];
          if constexpr (kLdmatrix) {
            // (k, m) / (k, n) slices: .trans hands each lane its (m, k) pairs; channels-last
            // (m, k) / (n, k) slices are the fragments' own order (no .trans).  A lane gives
            // the address of row `row` of matrix q (k rows k-major, m or n rows k-contiguous)
            using Ld = cc::LdmatrixM8n8;
            const int ma = Ld::src_matrix(lane, 4), mb = Ld::src_matrix(lane, 2), row = Ld::src_row(lane);
            constexpr int kr = kNhwc ? 0 : 1, mr = 1 - kr;   // which index the row walks
#pragma unroll
            for (int i = 0; i < AM; ++i)   // matrix q: k block q >> 1, m block q & 1
              cc::ldmatrix<4, !kNhwc>(af[i], &cc::slice_at<kNhwc>(smem_a, buf, kk + 8 * (ma >> 1) + kr * row,
                                                   wm0 + i * Atom::kM + 8 * (ma & 1) + mr * row));
#pragma unroll
            for (int j = 0; j < AN; ++j)   // matrix q: k block q
              cc::ldmatrix<2, !kNhwc>(bf[j], &cc::slice_at<kNhwc>(smem_b, buf, kk + 8 * mb + kr * row, wn0 + j * Atom::kN + mr * row));
          } else {
#pragma unroll
            for (int e = 0; e < Atom::kARegs; ++e) {
              const cc::MmaCoord c = Atom::a_coord(lane, e);
#pragma unroll
              for (int i = 0; i < AM; ++i)
                af[i][e] = cc::operand_register(cc::slice_at<kNhwc>(smem_a, buf, kk + c.col, wm0 + i * Atom::kM + c.row));
            }
#pragma unroll
            for (int e = 0; e < Atom::kBRegs; ++e) {
              const cc::MmaCoord c = Atom::b_coord(lane, e);
#pragma unroll
              for (int j = 0; j < AN; ++j)
                bf[j][e] = cc::operand_register(cc::slice_at<kNhwc>(smem_b, buf, kk + c.row, wn0 + j * Atom::kN + c.col));
            }
          }
#pragma unroll
          for (int i = 0; i < AM; ++i)
#pragma unroll
            for (int j = 0; j < AN; ++j) Atom::mma(macc[i][j], af[i], bf[j], macc[i][j]);
        }
      } else {
        cc::require(false, "the tensor-core implicit GEMM needs sm_80 or newer");
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        Acc a[TM], b[TN];
        cc::load_fragment(&smem_a[buf][kk][tm * TM], a);
        cc::load_fragment(&smem_b[buf][kk][tn * TN], b);
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < TN; ++j) acc[i][j] = cc::fma(a[i], b[j], acc[i][j]);
      }
    }
  };

  // Main loop ---------------------------------------------------------------
  if constexpr (kAligned) {
    cc::require(cpg % BK == 0, "tap-aligned implicit GEMM needs C/G % BK == 0");
    const Index taps = static_cast<Index>(p.taps);
    const Index a_step = static_cast<Index>(kARowsStep) * x_stride_c;
    const S a_fill = a_valid ? cc::to_stage<S, kTf32>(cval) : cc::zero<S>();
    bool a_load = false;
    auto set_tap = [&](Index tap) {       // once per tap: both offsets, out of line
      if (a_valid) {
        const cc::TapOffset<Index> t = cc::gather_tap_offset(p, a_base, a_x_n, tap);
        a_off = t.off;
        a_load = t.inside;
      }
      b_off = cc::weight_tap_offset(p, w_g, tap);
    };
    auto fetch_slice = [&](Index c0) {    // the slice's channels c0.. of the current tap
      const Index a_addr = a_off + (c0 + a_k) * x_stride_c;
#pragma unroll
      for (int j = 0; j < kAPerThread; ++j) frag_a[j] = a_load ? cc::to_stage<S, kTf32>(x[a_addr + j * a_step]) : a_fill;
      const Index w_r = b_off + (c0 + b_k) * w_stride_c;
#pragma unroll
      for (int j = 0; j < kBPerThread; ++j) {
        const Index col = block_n + b_n + kBColsStep * j;
        frag_b[j] = col < Kg ? cc::to_stage<S, kTf32>(w[w_r + col * w_stride_k]) : cc::zero<S>();
      }
    };
    if constexpr (kAsync) {
      // kStages-deep cp.async pipeline over the slices (tap, c0) in order.  The producer
      // cursor runs kStages - 1 slices ahead of the math; each iteration waits for its
      // slice's group, one barrier (the slice landed for every thread, and every warp is
      // done with the stage the producer refills next), issues a slice, multiplies.
      // Padding and rows/columns outside the GEMM are plain shared stores (cval, zero),
      // visible after the same barrier.
      const Index slices = taps * (cpg / BK);
      Index p_tap = 0, p_c0 = 0;
      set_tap(0);
      // This thread's copies of a slice: channels-last, one 16-byte copy of A's row a_m
      // (channels a_k * kChunk..) and one of B's column b_n (threads past the tile's copies
      // idle); else kAPerThread / kBPerThread single elements.  `live` false (past the last
      // slice): the copies read nothing and zero-fill a stage no iteration reads, so the
      // loop has one path (no duplicated body around a branch).
      constexpr int kCopiesA = kNhwc ? 1 : kAPerThread, kCopiesB = kNhwc ? 1 : kBPerThread;
      constexpr int kCopyElems = kNhwc ? kChunk : 1;
      constexpr int kCopyBytes = kCopyElems * static_cast<int>(sizeof(S));
      const Index x_cs = kNhwc ? Index(1) : x_stride_c, w_cs = kNhwc ? Index(1) : w_stride_c;
      const Index a_jstep = kARowsStep * x_cs;   // between a thread's k-major A elements
      const bool b_col = !kNhwc || b_n < BN;
      auto own_a_k = [&](int j) { return kNhwc ? a_k * kChunk : a_k + kARowsStep * j; };
      auto own_b_k = [&](int j) { return kNhwc ? b_k * kChunk : b_k; };
      auto own_b_n = [&](int j) { return kNhwc ? b_n : b_n + kBColsStep * j; };
      auto issue = [&](int stage, bool live) {
        if (a_row) {
          const Index a_src = a_off + (p_c0 + own_a_k(0)) * x_cs;
#pragma unroll
          for (int j = 0; j < kCopiesA; ++j) {
            S* dst = &cc::slice_at<kNhwc>(smem_a, stage, own_a_k(j), a_m);
            if (a_load) {
              cc::cp_async_zfill<kCopyBytes>(dst, x + a_src + j * a_jstep,
                                             live ? kCopyBytes : 0);
            } else {
#pragma unroll
              for (int e = 0; e < kCopyElems; ++e) dst[e] = a_fill;
            }
          }
        }
        if (b_col) {
          const Index w_src = b_off + (p_c0 + own_b_k(0)) * w_cs;
#pragma unroll
          for (int j = 0; j < kCopiesB; ++j) {
            const Index col = block_n + own_b_n(j);
            S* dst = &cc::slice_at<kNhwc>(smem_b, stage, own_b_k(j), own_b_n(j));
            if (col < Kg) {
              cc::cp_async_zfill<kCopyBytes>(dst, w + w_src + col * w_stride_k, live ? kCopyBytes : 0);
            } else {
#pragma unroll
              for (int e = 0; e < kCopyElems; ++e) dst[e] = cc::zero<S>();
            }
          }
        }
        p_c0 += BK;
        if (p_c0 == cpg) {
          p_c0 = 0;
          if (++p_tap < taps) set_tap(p_tap);
        }
      };
#pragma unroll
      for (int st = 0; st < kStages - 1; ++st) {
        issue(st, st < slices);
        cc::cp_async_commit();
      }
      // the loop, instantiated with and without the TF32 rounding pass (a uniform switch
      // taken once, not per slice): each thread rounds its own landed copies once, unless
      // the host says the operands are TF32 already (p.aux[0]: the dispatcher rounds them
      // under precision="tf32"; the tensor core would ignore the low bits of others)
      auto pipeline = [&](const bool round) {     // inlined twice, `round` a constant
        int read = 0, write = kStages - 1;
        for (Index sl = 0; sl < slices; ++sl) {   // the hot loop
          cc::cp_async_wait_group<kStages - 2>();
          if constexpr (kTf32) {
            if (round && a_row) {   // (a fill is rounded already: idempotent)
#pragma unroll
              for (int j = 0; j < kCopiesA; ++j)
#pragma unroll
                for (int e = 0; e < kCopyElems; ++e) {
                  S& v = cc::slice_at<kNhwc>(smem_a, read, own_a_k(j) + e, a_m);
                  v = cc::round_tf32(v);
                }
            }
            if (round && b_col) {
#pragma unroll
              for (int j = 0; j < kCopiesB; ++j)
#pragma unroll
                for (int e = 0; e < kCopyElems; ++e) {
                  S& v = cc::slice_at<kNhwc>(smem_b, read, own_b_k(j) + e, own_b_n(j));
                  v = cc::round_tf32(v);
                }
            }
          }
          __syncthreads();
          issue(write, sl + (kStages - 1) < slices);
          cc::cp_async_commit();
          mma_slice(read);
          read = read + 1 == kStages ? 0 : read + 1;
          write = write + 1 == kStages ? 0 : write + 1;
        }
      };
      if (kTf32 && p.aux[0] == 0) {
        pipeline(true);
      } else {
        pipeline(false);
      }
      cc::cp_async_wait_all();
    } else {
      set_tap(0);
      fetch_slice(0);
      stash(0);
      __syncthreads();
      int buf = 0;
      Index c_first = BK;                   // slice (tap 0, c 0) is already staged
      for (Index tap = 0; tap < taps; ++tap) {
        if (tap > 0) set_tap(tap);
        for (Index c0 = c_first; c0 < cpg; c0 += BK) {   // the hot loop
          fetch_slice(c0);                  // global loads overlap the FMAs below
          mma_slice(buf);
          stash(buf ^ 1);
          __syncthreads();
          buf ^= 1;
        }
        c_first = 0;
      }
      mma_slice(buf);                       // the last staged slice
    }
  } else {
    const Index k_tiles = (Kr + BK - 1) / BK;
    fetch(Index(0));
    stash(0);
    __syncthreads();
    for (Index kt = 0; kt < k_tiles; ++kt) {
      const int buf = static_cast<int>(kt & 1);
      const bool has_next = kt + 1 < k_tiles;
      if (has_next) fetch((kt + 1) * BK);  // global loads overlap the FMAs below
      mma_slice(buf);
      if (has_next) stash(buf ^ 1);
      __syncthreads();
    }
  }

  // Epilogue ----------------------------------------------------------------
  const cc::Epilogue<T, Acc> epilogue(p);
  if constexpr (kMma) {
#pragma unroll
    for (int i = 0; i < AM; ++i)
#pragma unroll
      for (int j = 0; j < AN; ++j)
#pragma unroll
        for (int e = 0; e < Atom::kCElems; ++e) {
          const cc::MmaCoord c = Atom::c_coord(lane, e);
          const Index m = block_m + wm0 + i * Atom::kM + c.row;
          const Index col = block_n + wn0 + j * Atom::kN + c.col;
          if (m < M && col < Kg) {
            cc::OutputPosition<R, Index> pos;
            pos.set(p, m);
            const Index k = g * Kg + col;
            epilogue(y, pos.y_offset(p, k), bias, k, macc[i][j][e]);
          }
        }
    return;
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const Index m = block_m + tm * TM + i;
    if (m >= M) continue;
    cc::OutputPosition<R, Index> pos;
    pos.set(p, m);
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const Index col = block_n + tn * TN + j;
      if (col < Kg) {
        const Index k = g * Kg + col;
        epilogue(y, pos.y_offset(p, k), bias, k, acc[i][j]);
      }
    }
  }
}
