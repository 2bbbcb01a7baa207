// cupyconv: multistage implicit-GEMM tiles (issue 26 items 3 and 4), any spatial rank R.
//
//   implicit_gemm_fma_dmma<T, Acc, R, Index, BM, BN, BK, STAGES, TILE_M, TILE_N, Math, kCL>
//
// The GEMM and its gather are those of implicit_gemm_fprop.cu (GEMM-K ordered (tap,
// channel), the tap-aligned loop: C/G % BK == 0, the boundary remap once per tap, out of
// line).  What differs is the main loop and the fragments:
//
// * STAGES-deep cp.async pipeline in dynamic shared memory, K-tiles of BK = 16 per stage:
//   STAGES - 1 slices in flight while one is multiplied, one wait + one barrier per slice.
//   Every operand element is one cp.async of sizeof(T) bytes (any strides, any layout);
//   padding and rows/columns outside the GEMM are plain shared stores under the same
//   barrier; past the last slice the copies zero-fill without reading, so the loop has one
//   path.  The host passes the dynamic shared size it launched with in p.aux[1]; the
//   kernel checks it against its own (a disagreement traps).
// * Math = cc::SimtFma (float32, 128x128x16x3, 48 KiB): 16 x 16 threads, each an 8 x 8
//   register block of rows {4 tm + i, BM/2 + 4 tm + i} and columns {4 tn + j, BN/2 + 4 tn +
//   j} (i, j < 4; TILE_M x TILE_N = 8 x 8 is the thread's block).  The A fragment of a
//   k-step is two LDS.128 whose 16 distinct lanes are 16 bytes apart (2 wavefronts each;
//   the 128x128x8 tile's 8 contiguous rows per thread put its lanes 32 bytes apart: 4
//   wavefronts).  Shared A is [k][m]; shared B is [k][n] with n's bits 2-4 XOR (k & 7)
//   (FmaStageLayout): the B loader's lanes (8 k x 4 n, k and k + 8 per thread) store to 32
//   distinct banks (unswizzled: 8 lanes per bank), and a 4-column fragment stays one aligned
//   16-byte chunk.
// * Math = an f64 MMA atom (cc::MmaF64_m8n8k4, DMMA; 128x64x16x3, 72 KiB opted in): a warp
//   per warp tile, TILE_M x TILE_N = 32 x 64 (4 x 8 atoms, 64 double accumulators per lane),
//   4 warps as 4 x 1 (128 threads: 255 registers each, two CTAs fill an sm_80/sm_90
//   register file; a 128x128 tile's 32,768 accumulator registers are half of it, one CTA).
//   Shared A is [m][k] and B [n][k], k contiguous: a row of BK = 16 doubles is 128
//   bytes = 8 chunks of 16 bytes, chunk c of row r stored at c ^ swz(r) with swz(r) =
//   4 (r & 1) + ((r >> 1) & 3) (KContiguousStageLayout).  One LDS.128 hands a lane two
//   consecutive k of its atom row (or column), so the lane's atom k-slot t stands for the k
//   pair 2t, 2t + 1 of an 8-deep half: two m8n8k4 steps per 128-bit load (A and B use the
//   same k permutation, so the sum is the same sum).  Lanes (g, t) of a quarter warp read
//   rows 2q, 2q + 1 at chunks t ^ swz: 8 distinct chunks, no conflict.  swz reads r & 7
//   only, so atom rows 8 i apart are 8 i BK elements apart: every fragment read of a slice
//   is one of four bases (A, B x two halves) plus a constant.  The A gather has a lane per
//   row, copy q at k = a_k ^ q with a_k = (r >> 3) & 1 (rows r and r + 8 share a swizzle and
//   store the two halves of a chunk: 2 wavefronts per 32 rows, the least for 8-byte
//   stores); its sources are a running pointer (x + a_cur, stepped per slice).
//   Math = cc::MmaF64_m16n8k16 (sm_90, DMMA.16x8x16): the same tile and layout, 2 x 8 atoms
//   per warp; its k-slot t + 4 q stands for k = 8 (q >> 1) + 2 t + (q & 1), so the same
//   LDS.128 pairs fill it.  Below sm_90 that instantiation compiles and traps.
// * kCL (the DMMA tiles only; registry variants 9 and 10): channels-last operands, x (N, *S,
//   C) and w [K][taps][C], every copy 16 bytes of two consecutive channels (1 L2 sector
//   fetched per sector used; the 8-byte copies' KCRS weights fetch 4).  A: a lane per row,
//   copy q = channels 2q, 2q + 1 at a_dst0 ^ 2q; B: lane t on output channel t % BN, copies
//   q = chunks t / BN + 2q at b_dst0 ^ 4q.  Eight lanes of consecutive rows store one
//   logical chunk to eight physical ones (swz over r & 7 is a permutation): 4 wavefronts per
//   warp store, the least for 16-byte stores.  The same layout, fragments and loop.  Needs
//   unit channel strides and 16-byte aligned operands whose other strides are multiples
//   of two elements (launch.channels_last_reason; the kernel traps on what it can see).
//
// Shared-memory layouts are mirrored by the address model in tests/kernels/
// test_kernels_fma_dmma.py (banks and wavefronts of every fragment read and loader store;
// the DMMA layout's host model is cupyconv/_kernels/smem_layout.kcontiguous_offset).
// Grid: x = ceil(M / BM), y = ceil(Kg / BN), z = groups of this launch (g0 + z).
#include "implicit_gemm_parts.cuh"

namespace cc {

/// The SIMT math of the FMA multistage tile (no tensor cores).
struct SimtFma {
  static constexpr int kM = 1, kN = 1, kK = 1;   ///< one multiply-add per thread
  using AElement = float;
};

template <typename Math> struct IsSimtFma { static constexpr bool value = false; };
template <> struct IsSimtFma<SimtFma> { static constexpr bool value = true; };

/// One stage of the FMA tile: A [k][m]; B [k][n] with n's bits 2-4 XOR (k & 7).
template <int BM, int BN, int BK>
struct FmaStageLayout {
  static_assert(BN % 32 == 0, "the B swizzle permutes 16-byte chunks within 32 columns");
  static constexpr int kAElems = BK * BM, kBElems = BK * BN;   ///< elements per stage
  static CC_CONSTEXPR int a(int k, int m) { return k * BM + m; }
  static CC_CONSTEXPR int b(int k, int n) { return k * BN + (n ^ ((k & 7) << 2)); }
};

/// One stage of the DMMA tile: A [m][k] and B [n][k], rows of BK = 16 doubles (8 chunks of
/// 16 bytes), chunk c of row r at c ^ swz(r).
template <int BM, int BN, int BK>
struct KContiguousStageLayout {
  static_assert(BK == 16, "a k-contiguous row is 8 chunks of two doubles (128 bytes: every bank once)");
  static constexpr int kAElems = BM * BK, kBElems = BN * BK;
  static CC_CONSTEXPR int swz(int r) { return ((r & 1) << 2) | ((r >> 1) & 3); }
  static CC_CONSTEXPR int row(int r, int k) { return r * BK + ((((k >> 1) ^ swz(r)) << 1) | (k & 1)); }
  static CC_CONSTEXPR int a(int k, int m) { return row(m, k); }
  static CC_CONSTEXPR int b(int k, int n) { return row(n, k); }
};

/// Threads of a tile: 256 for cc::SimtFma (16 x 16 threads), else one warp per warp tile.
template <int BM, int BN, int TILE_M, int TILE_N, bool kSimt>
struct FmaDmmaThreads {
  static constexpr int value = kSimt ? kBlockThreads : 32 * (BM / TILE_M) * (BN / TILE_N);
};

/// Resident CTAs per SM a tile is compiled for (the __launch_bounds__ minimum): 2 for
/// float32 with 32-bit indices (128 registers at 256 threads) and for the 4-warp float64
/// tiles (255 registers at 128 threads: two CTAs fill the register file), else 1.
template <typename Index, typename Acc, int kThreads>
struct FmaDmmaMinBlocks {
  static constexpr int value =
      ((sizeof(Index) == 4 && sizeof(Acc) == 4) || (sizeof(Acc) == 8 && kThreads <= 128)) ? 2 : 1;
};

/// Two consecutive doubles of shared memory (one LDS.128).
struct alignas(16) Double2 { double v[2]; };

}  // namespace cc

template <typename T, typename Acc, int R, typename Index, int BM, int BN, int BK, int kStages,
          int TILE_M, int TILE_N, typename Math, bool kCL>
__global__ void __launch_bounds__(
    (cc::FmaDmmaThreads<BM, BN, TILE_M, TILE_N, cc::IsSimtFma<Math>::value>::value),
    (cc::FmaDmmaMinBlocks<Index, Acc, cc::FmaDmmaThreads<BM, BN, TILE_M, TILE_N, cc::IsSimtFma<Math>::value>::value>::value))
implicit_gemm_fma_dmma(const __grid_constant__ cc::ConvParams<R> p, const T* __restrict__ x,
                         const T* __restrict__ w, T* __restrict__ y, const T* __restrict__ bias) {
  // Types and tile geometry ---------------------------------------------------
  static_assert(cc::IsIndexType<Index>::value, "Index must be int or long long");
  constexpr bool kSimt = cc::IsSimtFma<Math>::value;
  static_assert(kSimt ? (sizeof(T) == 4 && sizeof(Acc) == 4)
                      : (sizeof(T) == 8 && sizeof(Acc) == 8 && sizeof(typename Math::AElement) == 8),
                "cc::SimtFma takes float32; the MMA tile takes float64");
  static_assert(kSimt || (Math::kM == 8 && Math::kN == 8 && Math::kK == 4) ||
                    (Math::kM == 16 && Math::kN == 8 && Math::kK == 16),
                "the DMMA multistage tile's fragments are built for cc::MmaF64_m8n8k4 and "
                "cc::MmaF64_m16n8k16");
  /// the f64 m16n8k16 atom (sm_90) in the MMA tile
  constexpr bool kK16 = !kSimt && Math::kK == 16;
  static_assert(!kCL || !kSimt, "the channels-last loaders are the DMMA tile's");
  using S = T;                                   ///< staged element
  using Layout = typename cc::Conditional<kSimt, cc::FmaStageLayout<BM, BN, BK>,
                                          cc::KContiguousStageLayout<BM, BN, BK>>::type;
  constexpr int kThreads = cc::FmaDmmaThreads<BM, BN, TILE_M, TILE_N, kSimt>::value;
  static_assert(kThreads == (kSimt ? 256 : 128), "the FMA tile is laid out for 256 threads, the DMMA tile for 128");
  static_assert(BK == 16 && kStages >= 2, "K-tiles of 16, at least two stages");
  constexpr int kARowsStep = kThreads / BM;      ///< A loader: k-rows covered per pass
  constexpr int kAPerThread = BK / kARowsStep;   ///< A elements copied per thread per slice
  // B loader: kSimt, k-rows b_k + 8 r (r < BK / 8) of columns b_n + kBColsStep q (the
  // swizzle of (k & 7) is then one per thread: constant offsets, conflict-free stores);
  // else k-row b_k of columns b_n + kBColsStep q
  constexpr int kBRows = kSimt ? BK / 8 : 1;
  constexpr int kBKThreads = kSimt ? 8 : BK;       ///< threads along k
  constexpr int kBColsStep = kThreads / kBKThreads;
  constexpr int kBPerThread = kBRows * (BN / kBColsStep);   ///< B elements per thread per slice
  static_assert(kThreads % BM == 0 && BK % kARowsStep == 0 && BN % kBColsStep == 0,
                "loader layout: BM | threads, (threads/BM) | BK, (threads/BK) | BN");
  constexpr int kStageElems = Layout::kAElems + Layout::kBElems;
  constexpr long long kSmemBytes = static_cast<long long>(kStages) * kStageElems * sizeof(S);
  // SIMT: 16 x 16 threads of TILE_M x TILE_N = 8 x 8 (two 4-row and two 4-column halves)
  static_assert(!kSimt || (TILE_M == 8 && TILE_N == 8 && BM == 16 * TILE_M && BN == 16 * TILE_N),
                "cc::SimtFma: 16 x 16 threads, 8 x 8 outputs each");
  // MMA: warps (BM / TILE_M) x (BN / TILE_N)
  constexpr int kWarpsM = kSimt ? 1 : BM / TILE_M;
  constexpr int kWarpsN = kSimt ? 1 : BN / TILE_N;
  static_assert(kSimt || (kWarpsM * kWarpsN * 32 == kThreads && BM % TILE_M == 0 && BN % TILE_N == 0),
                "the warp tiles cover the CTA tile once");

  cc::require_block_threads<kThreads>();
  cc::require(p.aux[1] == kSmemBytes, "launched with another dynamic shared size than the tile's");
  CUPYCONV_DYNAMIC_SHARED(S, smem);              // [stage][A elements, B elements]

  const int tid = static_cast<int>(threadIdx.x);
  const Index g = static_cast<Index>(p.g0) + static_cast<Index>(blockIdx.z);
  const Index M = static_cast<Index>(p.gemm_m);
  const Index Kg = static_cast<Index>(p.kpg);
  const Index cpg = static_cast<Index>(p.cpg);
  const Index block_m = static_cast<Index>(blockIdx.x) * BM;
  const Index block_n = static_cast<Index>(blockIdx.y) * BN;
  const Index x_stride_c = static_cast<Index>(p.x_stride_c);
  const Index w_stride_c = static_cast<Index>(p.w_stride_c);
  const Index w_stride_k = static_cast<Index>(p.w_stride_k);
  cc::require(cpg % BK == 0, "the multistage implicit GEMM needs C/G % 16 == 0");
  // channels-last: 16-byte copies of two consecutive channels (launch.channels_last_reason
  // checks the strides and addresses on the host; the kernel traps on what it can see)
  cc::require(!kCL || (x_stride_c == 1 && w_stride_c == 1 &&
                       ((reinterpret_cast<unsigned long long>(x) |
                         reinterpret_cast<unsigned long long>(w)) & 15) == 0),
              "the channels-last DMMA tile needs unit channel strides and 16-byte aligned operands");

  // A loader: row a_m; FMA: k-rows a_k + kARowsStep j, lanes on consecutive rows (one k:
  // 32 banks).  DMMA: a lane per row, copy q of a slice is k = a_k ^ q with a_k = (a_m >> 3)
  // & 1, stored at a_dst0 ^ q (the chunk index sits in bits 1-3, the half in bit 0): rows r
  // and r + 8 (one swizzle) store the two halves of a chunk, so a warp's 32 rows take 2
  // wavefronts, the least for 8-byte stores (a_k = 0: 4)
  static_assert(kSimt || kThreads == BM, "the DMMA A loader: a lane per row");
  // Channels-last (kCL): a lane per row too, copy q is the 16-byte chunk of channels 2 q,
  // 2 q + 1 (a_k = 0), stored at a_dst0 ^ 2 q: 8 lanes of consecutive rows store 8
  // distinct chunks (swz(r) over r & 7 is a permutation), 4 wavefronts per warp, the least
  const int a_m = kSimt ? tid % BM : tid;
  const int a_k = kSimt ? tid / BM : (kCL ? 0 : (a_m >> 3) & 1);
  const bool a_valid = block_m + a_m < M;
  const cc::GatherRow<R, Index> a_row(p, a_valid ? block_m + a_m : Index(0), g, cpg, x_stride_c);
  // B loader: k-row b_k, columns b_n + kBColsStep * j ------------------------------
  // Channels-last (kCL): the lane's output channel b_n = tid % BN, chunks b_k / 2 + 2 q
  // (q < BK / 4, b_k = 2 (tid / BN)) of its BK consecutive weights of the tap (KRSC)
  static_assert(!kCL || (kThreads == 2 * BN && BK == 16), "the channels-last B loader: two lanes per column");
  const int b_k = kCL ? 2 * (tid / BN) : tid % kBKThreads;
  const int b_n = kCL ? tid % BN : tid / kBKThreads;
  const Index w_g = g * Kg * w_stride_k;
  const S a_fill = a_valid ? cc::make_scalar<S>(p.cval_re, p.cval_im) : cc::zero<S>();
  // DMMA: the slice's sources are x + a_cur and w + b_cur (the thread's first copy; stepped
  // by BK channels a slice, reset once per tap)
  const Index b_base = static_cast<Index>(block_n + b_n) * w_stride_k + b_k * w_stride_c;
  const Index a_kbase = a_k * x_stride_c;
  Index a_off = 0, b_off = 0, a_cur = 0, b_cur = 0;
  bool a_load = false;
  auto set_tap = [&](Index tap) {        // once per tap, out of line: A's offset, B's
    const cc::TapOffset<Index> t = a_valid ? a_row.at(p, tap) : cc::TapOffset<Index>{0, false};
    a_off = t.off;
    a_load = t.inside;
    b_off = cc::weight_tap_offset(p, w_g, tap);
    a_cur = a_off + a_kbase;
    b_cur = b_off + b_base;
  };

  // The pipeline's producer: slice (p_tap, p_c0) into stage `stage` ------------------
  const Index taps = static_cast<Index>(p.taps);
  const Index slices = taps * (cpg / BK);
  const Index a_jstep = static_cast<Index>(kARowsStep) * x_stride_c;
  Index p_tap = 0, p_c0 = 0;
  set_tap(0);
  // DMMA copies.  A: the thread's copy q = 2 j + e (above) reads a running pointer: x + a_cur
  // + j a_pstep for k-pair j, plus a_estep for e = 1 (k = a_k ^ 1).  B: copy
  // q is column b_n + kBColsStep q, k-row b_k: n + kBColsStep q keeps n & 7, so the swizzle,
  // and the destination is b_dst0 + q kBColsStep BK; it reads a running pointer, while q
  // kBColsStep < b_left (columns past K/G are zeros)
  static_assert(kSimt || kBColsStep % 8 == 0, "B copies keep their row's swizzle");
  using KLayout = cc::KContiguousStageLayout<BM, BN, 16>;
  const int a_dst0 = kSimt ? 0 : KLayout::a(a_k, a_m);
  const Index a_pstep = 2 * x_stride_c, a_estep = (1 - 2 * a_k) * x_stride_c;
  const Index b_qstep = static_cast<Index>(kBColsStep) * w_stride_k;
  const int b_dst0 = kSimt ? 0 : KLayout::b(b_k, b_n);
  const Index b_left = Kg - block_n - b_n;
  auto issue = [&](int stage, bool live) {
    S* const sa = smem + stage * kStageElems;
    S* const sb = sa + Layout::kAElems;
    const int bytes = live ? int(sizeof(S)) : 0;
    if constexpr (kSimt) {
      const Index a_src = a_off + (p_c0 + a_k) * x_stride_c;
#pragma unroll
      for (int j = 0; j < kAPerThread; ++j) {
        S* dst = sa + Layout::a(a_k + kARowsStep * j, a_m);
        if (a_load) {
          cc::cp_async_zfill<sizeof(S)>(dst, x + a_src + j * a_jstep, bytes);
        } else {
          *dst = a_fill;
        }
      }
      const Index w_src = b_off + (p_c0 + b_k) * w_stride_c;
#pragma unroll
      for (int j = 0; j < kBPerThread; ++j) {
        const int r = j % kBRows, n = b_n + kBColsStep * (j / kBRows);
        S* dst = sb + Layout::b(b_k + 8 * r, n);
        if (block_n + n < Kg) {
          cc::cp_async_zfill<sizeof(S)>(dst, w + w_src + (8 * r) * w_stride_c + (block_n + n) * w_stride_k, bytes);
        } else {
          *dst = cc::zero<S>();
        }
      }
    } else if constexpr (kCL) {
      const int bytes16 = live ? 16 : 0;
      if (a_load) {                                // chunk q: channels 2 q, 2 q + 1
        const T* src = x + a_cur;
#pragma unroll
        for (int q = 0; q < BK / 2; ++q) cc::cp_async_zfill<16>(sa + (a_dst0 ^ (2 * q)), src + 2 * q, bytes16);
      } else {
#pragma unroll
        for (int q = 0; q < BK; ++q) sa[a_dst0 ^ q] = a_fill;
      }
      if (b_left > 0) {                            // chunk b_k / 2 + 2 q at b_dst0 ^ 4 q
        const T* src = w + b_cur;
#pragma unroll
        for (int q = 0; q < BK / 4; ++q) cc::cp_async_zfill<16>(sb + (b_dst0 ^ (4 * q)), src + 4 * q, bytes16);
      } else {
#pragma unroll
        for (int q = 0; q < BK / 4; ++q) {
          sb[b_dst0 ^ (4 * q)] = cc::zero<S>();
          sb[(b_dst0 ^ (4 * q)) ^ 1] = cc::zero<S>();
        }
      }
    } else {
      if (a_load) {                                // one branch per slice, not per copy
        const T* src = x + a_cur;
#pragma unroll
        for (int j = 0; j < BK / 2; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e)
            cc::cp_async_zfill<sizeof(S)>(sa + (a_dst0 ^ (2 * j + e)), e ? src + a_estep : src, bytes);
          if (j + 1 < BK / 2) src += a_pstep;
        }
      } else {
#pragma unroll
        for (int q = 0; q < BK; ++q) sa[a_dst0 ^ q] = a_fill;
      }
      const T* src = w + b_cur;
      S* const db = sb + b_dst0;
#pragma unroll
      for (int q = 0; q < kBPerThread; ++q) {
        if (q * kBColsStep < b_left) {
          cc::cp_async_zfill<sizeof(S)>(db + q * kBColsStep * BK, src, bytes);
        } else {
          db[q * kBColsStep * BK] = cc::zero<S>();
        }
        if (q + 1 < kBPerThread) src += b_qstep;
      }
    }
    p_c0 += BK;
    a_cur += BK * x_stride_c;
    b_cur += BK * w_stride_c;
    if (p_c0 == cpg) {
      p_c0 = 0;
      if (++p_tap < taps) set_tap(p_tap);
    }
  };

  // Accumulators and the math of one stage ------------------------------------------
  const int lane = tid & 31, warp = tid >> 5;
  const int tm = tid % 16, tn = tid / 16;                    // SIMT thread block
  const int wm0 = (warp % kWarpsM) * TILE_M, wn0 = (warp / kWarpsM) * TILE_N;
  constexpr int kAccM = kSimt ? TILE_M : TILE_M / Math::kM, kAccN = kSimt ? TILE_N : TILE_N / Math::kN;
  constexpr int kAccE = kSimt ? 1 : (kK16 ? 4 : 2);          // doubles per lane per atom
  Acc acc[kAccM][kAccN][kAccE];
#pragma unroll
  for (int i = 0; i < kAccM; ++i)
#pragma unroll
    for (int j = 0; j < kAccN; ++j)
#pragma unroll
      for (int e = 0; e < kAccE; ++e) acc[i][j][e] = cc::zero<Acc>();

  // DMMA fragment reads: the lane's element of half h (k 8 h + 2 t) in atom row (column) 0 is
  // frag_a0 ^ 8 h (frag_b0 ^ 8 h: the half flips chunk bit 2, element bit 3); atom rows 8 i
  // further are kRow8 i further (swz reads r & 7 only, which 8 i keeps), so every LDS.128 of
  // a slice is a base and a constant offset
  constexpr int kRow8 = 8 * BK;
  int frag_a0 = 0, frag_b0 = 0;
  if constexpr (!kSimt) {
    const cc::MmaCoord ca = Math::a_coord(lane, 0), cb = Math::b_coord(lane, 0);
    frag_a0 = Layout::a(2 * ca.col, wm0 + ca.row);
    frag_b0 = Layout::b(2 * cb.row, wn0 + cb.col);
  }
  auto math = [&](int stage) {
    const S* const sa = smem + stage * kStageElems;
    const S* const sb = sa + Layout::kAElems;
    if constexpr (kSimt) {
      // Pointers that step a k-row per k-step: A's two halves at +0 and +BM/2, B's at its
      // swizzled column and +BN/2 (Layout::b(kk, BN/2 + n) = Layout::b(kk, n) + BN/2: the
      // swizzle moves bits 2-4 only)
      static_assert((BN / 2) % 32 == 0, "B's second half keeps the swizzle of its first");
      const S* pa = sa + Layout::a(0, 4 * tm);
      const S* pb = sb;
#pragma unroll 2
      for (int kk = 0; kk < BK; ++kk, pa += BM, pb += BN) {
        Acc a[8], b[8];
        Acc (&a0)[4] = *reinterpret_cast<Acc(*)[4]>(&a[0]);
        Acc (&a1)[4] = *reinterpret_cast<Acc(*)[4]>(&a[4]);
        Acc (&b0)[4] = *reinterpret_cast<Acc(*)[4]>(&b[0]);
        Acc (&b1)[4] = *reinterpret_cast<Acc(*)[4]>(&b[4]);
        const int nb = Layout::b(kk, 4 * tn) - kk * BN;   // the swizzled column of k-row kk
        cc::load_fragment(pa, a0);
        cc::load_fragment(pa + BM / 2, a1);
        cc::load_fragment(pb + nb, b0);
        cc::load_fragment(pb + nb + BN / 2, b1);
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[i][j][0] = cc::fma(a[i], b[j], acc[i][j][0]);
      }
    } else if constexpr (kK16 && cc::kHasMmaF64K16) {
      // m16n8k16: lane (g, t) holds A rows g, g + 8 and B column g at k-slots t + 4 q; slot
      // t + 4 q stands for k = 8 (q >> 1) + 2 t + (q & 1) (the pairs of one LDS.128), for A
      // and B alike: A element r + 4 h + 2 e (row g + 8 r) and B element 2 h + e are k
      // 8 h + 2 t + e
      // 64-bit indices: one A atom live at a time, B read once per A atom (ptxas 12.9 spills
      // with both A atoms live); else both A atoms live, B read once
      constexpr int kAGroups = sizeof(Index) == 8 ? kAccM : 1, kALive = kAccM / kAGroups;
#pragma unroll
      for (int ig = 0; ig < kAGroups; ++ig) {
        double af[kALive][8];
#pragma unroll
        for (int il = 0; il < kALive; ++il)
#pragma unroll
          for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const cc::Double2 v = *reinterpret_cast<const cc::Double2*>(
                  sa + (frag_a0 ^ (8 * h)) + kRow8 * (2 * (ig * kALive + il) + r));
              af[il][r + 4 * h] = v.v[0];
              af[il][r + 4 * h + 2] = v.v[1];
            }
#pragma unroll
        for (int j = 0; j < kAccN; ++j) {   // one B fragment live at a time (registers)
          double bf[4];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const cc::Double2 v = *reinterpret_cast<const cc::Double2*>(sb + (frag_b0 ^ (8 * h)) + kRow8 * j);
            bf[2 * h] = v.v[0];
            bf[2 * h + 1] = v.v[1];
          }
#pragma unroll
          for (int il = 0; il < kALive; ++il) {
            const int i = ig * kALive + il;
            Math::mma(acc[i][j], af[il], bf, acc[i][j]);
          }
        }
      }
    } else if constexpr (!kK16 && cc::kHasMma) {
      // lane's atom row (A), column (B) and k-slot t: slot t holds k = 8 h + 2 t + e
// both halves unrolled: 3.4 instructions per DMMA at rank 3 (NVRTC 12.9, sm_90); 64-bit
// indices, and rank 1 on sm_90, would spill with them (ptxas 12.9), so they loop over the
// halves
#pragma unroll ((sizeof(Index) == 8 || R == 1) ? 1 : BK / 8)
      for (int h = 0; h < BK / 8; ++h) {
        cc::Double2 af[kAccM];
#pragma unroll
        for (int i = 0; i < kAccM; ++i) af[i] = *reinterpret_cast<const cc::Double2*>(sa + (frag_a0 ^ (8 * h)) + kRow8 * i);
#pragma unroll
        for (int j = 0; j < kAccN; ++j) {   // one B fragment live at a time (registers)
          const cc::Double2 bf = *reinterpret_cast<const cc::Double2*>(sb + (frag_b0 ^ (8 * h)) + kRow8 * j);
#pragma unroll
          for (int e = 0; e < 2; ++e)
#pragma unroll
            for (int i = 0; i < kAccM; ++i) {
              const double fa[1] = {af[i].v[e]}, fb[1] = {bf.v[e]};
              Math::mma(acc[i][j], fa, fb, acc[i][j]);
            }
        }
      }
    } else {
      cc::require(false, kK16 ? "the f64 m16n8k16 tile needs sm_90 or newer"
                              : "the DMMA multistage tile needs sm_80 or newer");
    }
  };

  // Main loop: kStages - 1 slices in flight ------------------------------------------
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    issue(st, st < slices);
    cc::cp_async_commit();
  }
  int read = 0, write = kStages - 1;
  for (Index sl = 0; sl < slices; ++sl) {          // the hot loop
    cc::cp_async_wait_group<kStages - 2>();
    __syncthreads();                               // slice `read` landed for every thread; every
    issue(write, sl + (kStages - 1) < slices);     // warp is done with stage `write`
    cc::cp_async_commit();
    math(read);
    read = read + 1 == kStages ? 0 : read + 1;
    write = write + 1 == kStages ? 0 : write + 1;
  }
  cc::cp_async_wait_all();

  // Epilogue ----------------------------------------------------------------
  const cc::Epilogue<T, Acc> epilogue(p);
#pragma unroll
  for (int i = 0; i < kAccM; ++i)
#pragma unroll
    for (int e = 0; e < kAccE; ++e) {                 // one output row per (i, e)
      Index m;
      if constexpr (kSimt) {
        m = block_m + (i < 4 ? 4 * tm + i : BM / 2 + 4 * tm + i - 4);
      } else {
        m = block_m + wm0 + Math::kM * i + Math::c_coord(lane, e).row;
      }
      if (m >= M) continue;
      cc::OutputPosition<R, Index> pos;
      pos.set(p, m);
#pragma unroll
      for (int j = 0; j < kAccN; ++j) {
        Index col;
        if constexpr (kSimt) {
          col = block_n + (j < 4 ? 4 * tn + j : BN / 2 + 4 * tn + j - 4);
        } else {
          col = block_n + wn0 + Math::kN * j + Math::c_coord(lane, e).col;
        }
        if (col < Kg) {
          const Index k = g * Kg + col;
          epilogue(y, pos.y_offset(p, k), bias, k, acc[i][j][e]);
        }
      }
    }
}
