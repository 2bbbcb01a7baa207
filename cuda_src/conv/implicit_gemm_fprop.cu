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
//
// Math.  CUPYCONV_BLOCK_THREADS (256) threads laid out 16 x 16, each owning a
// TM x TN = (BM/16) x (BN/16) register block of CONTIGUOUS rows tm*TM.. and columns
// tn*TN..: per k the fragments are read with 16-byte vector loads (LDS.128).  The B
// tile's rows are padded by 4 elements so the loaders' stores are bank-conflict free.
// Shared memory is double buffered: the next K-slice is fetched into registers while
// the current one is multiplied, then stored to the other buffer; one
// __syncthreads per K-slice.  The float64 and TF32 tensor-core tiles instead copy their
// slices global -> shared with cp.async, 4 stages (3 slices in flight, kAsync below).
// The epilogue fuses alpha, beta and the bias.
// Grid: x = ceil(M / BM), y = ceil(Kg / BN), z = groups of this launch (g0 + z).
#include "../platform.cuh"
#include "../common/conv_common.cuh"
#include "../common/mma_atoms.cuh"
#include "../common/cp_async.cuh"

namespace cc {

/// Reads N consecutive elements from shared memory: 16-byte vector loads when the
/// fragment is whole vectors (its start is then 16-byte aligned), else scalar loads.
template <typename Acc, int N>
CC_DEVICE void load_fragment(const Acc* __restrict__ src, Acc (&dst)[N]) {
  struct alignas(16) Vec { Acc v[16 / sizeof(Acc) > 0 ? 16 / sizeof(Acc) : 1]; };
  constexpr int kVec = sizeof(Vec) / sizeof(Acc);
  if constexpr (sizeof(Acc) <= 16 && (N * sizeof(Acc)) % 16 == 0) {
#pragma unroll
    for (int v = 0; v < N / kVec; ++v) {
      const Vec chunk = reinterpret_cast<const Vec*>(src)[v];
#pragma unroll
      for (int e = 0; e < kVec; ++e) dst[v * kVec + e] = chunk.v[e];
    }
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) dst[e] = src[e];
  }
}

/// Offset of x at the padded coordinates `base + dilation * tap_eff` of weight tap
/// `tap` (row offset `x_row` added) and whether it is inside (constant padding
/// outside reads cval).  Out of line: it runs once per crossed tap, so it stays out
/// of the main loop's instruction stream.
template <typename Index>
struct TapOffset {
  Index off;    ///< element offset
  bool inside;  ///< false: constant padding (read cval)
};

template <int R, typename Index>
__device__ __noinline__ TapOffset<Index> gather_tap_offset(const ConvParams<R>& p,
                                                           const Index (&base)[R], Index x_row,
                                                           Index tap) {
  Index kappa[R];
  split_tap(p, tap, kappa);
  bool inside;
  const Index off = gather_offset(p, x_row, base, kappa, inside);
  return TapOffset<Index>{off, inside};
}

/// Offset of w at weight tap `tap` (out of line, as gather_tap_offset).
template <int R, typename Index>
__device__ __noinline__ Index weight_tap_offset(const ConvParams<R>& p, Index w_row, Index tap) {
  Index kappa[R];
  split_tap(p, tap, kappa);
  Index off = w_row;
#pragma unroll
  for (int i = 0; i < R; ++i) off += kappa[i] * static_cast<Index>(p.w_stride[i]);
  return off;
}

/// What a kernel stages in shared memory for an operand element: the accumulator type
/// (FMA variants), the tf32-rounded float (tf32 atom) or the element itself (f16, f64).
template <typename S, bool kTf32, typename T>
CC_DEVICE S to_stage(T v) {
  if constexpr (kTf32) {
    return round_tf32(v);
  } else {
    return to_accum<S>(v);
  }
}

/// Position of a GEMM-K index as (tap, channel), advanced without division.
template <typename Index>
struct TapChannel {
  Index tap;  ///< linear weight tap
  Index c;    ///< channel within the group
  /// Moves forward by `step` (< anything; loops once per crossed tap).
  CC_DEVICE void advance(Index step, Index cpg) {
    c += step;
    while (c >= cpg) {
      c -= cpg;
      ++tap;
    }
  }
};

}  // namespace cc

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
  static_assert(kVariant >= 0 && kVariant <= 2, "kVariant is 0 (general), 1 (tap-aligned) or 2 (tensor cores)");
  constexpr bool kAligned = kVariant >= 1;
  constexpr bool kMma = kVariant == 2;
  using Atom = typename cc::MmaAtomFor<T>::type;
  static_assert(!kMma || cc::MmaAtomFor<T>::kDefined, "tensor cores take float64, float32 (tf32) or float16");
  static_assert(!kMma || sizeof(Acc) == sizeof(typename Atom::CElement), "the atom accumulates in Acc");
  /// shared-memory element: the atom's operand type (tensor cores), else the accumulator
  using S = typename cc::Conditional<kMma, typename Atom::AElement, Acc>::type;
  constexpr bool kTf32 = kMma && sizeof(T) == 4;
  constexpr bool kLdmatrix = kMma && sizeof(S) == 2;      ///< f16 fragments through ldmatrix.trans
  constexpr int kPadA = kMma ? (sizeof(S) == 8 ? 4 : 16 / static_cast<int>(sizeof(S))) : 0;
  constexpr int kPadB = sizeof(S) == 2 ? 8 : 4;           ///< B row padding: conflict-free (16-byte rows)
  /// float64 / TF32 tensor-core tiles stage their operands with cp.async, kStages slices in
  /// flight (the element is the operand itself: TF32 rounds when a fragment is read);
  /// float16 (2-byte elements, below cp.async's 4) and the FMA tiles go through registers.
  constexpr bool kAsync = kMma && sizeof(S) == sizeof(T) && sizeof(T) >= 4;
  constexpr int kStages = kAsync ? 4 : 2;
  static_assert(kStages * BK * (BM + kPadA + BN + kPadB) * sizeof(S) <= 48 * 1024,
                "Tile exceeds 48 KiB of static shared memory");

  cc::require_block_shape();
  CUPYCONV_STATIC_SHARED(S, smem_a, [kStages][BK][BM + kPadA]);  // 16-byte aligned; poisoned per block when emulated
  CUPYCONV_STATIC_SHARED(S, smem_b, [kStages][BK][BN + kPadB]);

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

  // A loader: fixed row a_m; k-rows a_k + kARowsStep * j of each slice ---------
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
    a_x_n = pos.n * static_cast<Index>(p.x_stride_n) + g * cpg * x_stride_c;
  }
  cc::TapChannel<Index> a_cur{0, static_cast<Index>(a_k)};   // position of k0 + a_k
  a_cur.advance(0, cpg);
  Index a_tap = -1, a_off = 0;
  bool a_inside = false;

  // B loader: fixed k-row b_k; columns b_n + kBColsStep * j ----------------------
  const int b_k = tid % BK;
  const int b_n = tid / BK;
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
          if constexpr (kLdmatrix) {   // (k, m) / (k, n) slices: .trans gives the (m, k) pairs
            using Ld = cc::LdmatrixM8n8;
            const int ma = Ld::src_matrix(lane, 4), mb = Ld::src_matrix(lane, 2), row = Ld::src_row(lane);
#pragma unroll
            for (int i = 0; i < AM; ++i)   // matrix q: k block q >> 1, m block q & 1
              cc::ldmatrix<4, true>(af[i], &smem_a[buf][kk + 8 * (ma >> 1) + row][wm0 + i * Atom::kM + 8 * (ma & 1)]);
#pragma unroll
            for (int j = 0; j < AN; ++j)   // matrix q: k block q
              cc::ldmatrix<2, true>(bf[j], &smem_b[buf][kk + 8 * mb + row][wn0 + j * Atom::kN]);
          } else {
#pragma unroll
            for (int e = 0; e < Atom::kARegs; ++e) {
              const cc::MmaCoord c = Atom::a_coord(lane, e);
#pragma unroll
              for (int i = 0; i < AM; ++i)
                af[i][e] = cc::operand_register(smem_a[buf][kk + c.col][wm0 + i * Atom::kM + c.row]);
            }
#pragma unroll
            for (int e = 0; e < Atom::kBRegs; ++e) {
              const cc::MmaCoord c = Atom::b_coord(lane, e);
#pragma unroll
              for (int j = 0; j < AN; ++j)
                bf[j][e] = cc::operand_register(smem_b[buf][kk + c.row][wn0 + j * Atom::kN + c.col]);
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
      // `live` false (past the last slice): the copies read nothing and zero-fill a stage no
      // iteration reads, so the loop has one path (no duplicated body around a branch)
      auto issue = [&](int stage, bool live) {
        const Index a_addr = a_off + (p_c0 + a_k) * x_stride_c;
#pragma unroll
        for (int j = 0; j < kAPerThread; ++j) {
          S* dst = &smem_a[stage][a_k + kARowsStep * j][a_m];
          if (a_load) {
            cc::cp_async_zfill<sizeof(S)>(dst, x + a_addr + j * a_step, live ? sizeof(S) : 0);
          } else {
            *dst = a_fill;
          }
        }
        const Index w_r = b_off + (p_c0 + b_k) * w_stride_c;
#pragma unroll
        for (int j = 0; j < kBPerThread; ++j) {
          const Index col = block_n + b_n + kBColsStep * j;
          S* dst = &smem_b[stage][b_k][b_n + kBColsStep * j];
          if (col < Kg) {
            cc::cp_async_zfill<sizeof(S)>(dst, w + w_r + col * w_stride_k, live ? sizeof(S) : 0);
          } else {
            *dst = cc::zero<S>();
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
          if (round) {
#pragma unroll
            for (int j = 0; j < kAPerThread; ++j) {   // (a fill is rounded already: idempotent)
              S& e = smem_a[read][a_k + kARowsStep * j][a_m];
              e = cc::round_tf32(e);
            }
#pragma unroll
            for (int j = 0; j < kBPerThread; ++j) {
              S& e = smem_b[read][b_k][b_n + kBColsStep * j];
              e = cc::round_tf32(e);
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
