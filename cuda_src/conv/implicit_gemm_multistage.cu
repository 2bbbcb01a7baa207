// cupyconv: the multistage tensor-core implicit GEMM (CUTLASS-Ampere main loop), issue 26.
//
// The GEMM is the one of implicit_gemm_fprop.cu (per group: Y_g[M x Kg] = A_g[M x Kr] *
// B_g[Kr x Kg], GEMM-K ordered (tap, channel)) on channels-last operands: x (N, *S, C),
// w (K, *KS, C/G), both channel strides 1, every other stride and both start addresses
// multiples of 16 bytes, C/G a multiple of BK (the host checks: launch.py
// multistage_reason).  y may have any strides: the epilogue writes it in the caller's
// layout.  TF32 (float), float16 and bfloat16 (cc::MmaAtomFor: m16n8k16 f16 / bf16 with
// float accumulation; the 16-bit types share every line of the loop, only the atom
// differs); the TF32 operands must be rounded to TF32 already (the dispatcher does under
// precision="tf32"): the loop never rounds.
//
// Main loop (CUTLASS conv/threadblock/implicit_gemm_multistage.h):
// * A K-tile is BK channels of one tap: 128 bytes of every A row (GEMM row m) and every
//   B row (output channel n): BK = 32 for TF32, 64 for float16 / bfloat16.  kStages
//   K-tiles live in dynamic shared memory (3 for the 128x128 tile: 96 KiB, opted in past
//   48 KiB by the host; 4 for 64x64), each as [BM rows][128 B] of A then [BN rows][128 B] of B, the
//   16-byte chunks XOR-swizzled (common/swizzle.cuh's Swizzle128B: chunk c of row r at
//   c ^ (r % 8); no bank conflicts for the copies' writes or the ldmatrix reads, as the
//   address model of cupyconv/_kernels/smem_layout.py shows in
//   tests/kernels/test_multistage_layout.py).
// * Copies: thread t copies its A row t % BM (8 chunks, or 4 when two threads share a row
//   of the 64-row tile) and its B row t % BN with one 16-byte cp.async per chunk
//   (zero-filled past the GEMM's rows or columns; constant padding stores cval instead):
//   a warp's copy writes 32 rows at one logical chunk, which the swizzle spreads over the
//   banks, and the tap offset is one per thread.  A K-tile's copies are spread over the
//   warp's k-steps (kKSteps parts, each a thread's next 32-byte sector of the row), and
//   each K-tile ends with ONE commit, ONE cp.async.wait_group<kStages - 2> and ONE barrier.
// * Warps: 4 as 2 x 2, each a (BM/2) x (BN/2) warp tile (64x64 in the 128x128 tile) of
//   atoms; fragments by ldmatrix.x4 for A (16 rows x 2 chunks) and B (2 atoms of 8 rows
//   x 2 chunks), TF32 as pairs of .b16 (a 32-bit element is two 16-bit halves in order,
//   so the non-transposed load hands lane l the element (l / 4, l % 4) of each 8x4
//   matrix: the m16n8k8 fragment), double buffered across the k-steps: the next
//   k-step's fragments load while this one's MMAs issue.
// * Taps: the producer walks (tap, channel tile) in order, kStages - 1 K-tiles ahead of
//   the math, with one A and one B pointer per thread that step BK per K-tile; crossing
//   to the next tap gets both pointers and the padding flag from one out-of-line call
//   (tap_sources: the row offset with the R boundary remaps, the weight tap's offset),
//   once per thread per tap, its arguments kept in the caller's frame.
// * Hot loop: the small tiles (64x64) run kStages K-tiles per iteration, unrolled, so
//   every stage index is a constant (the copies' and ldmatrix's shared addresses are
//   registers plus immediates, no stage arithmetic): 3.3 instructions per HMMA on sm_90
//   against 5.0 one K-tile at a time; their last slices % kStages K-tiles and every
//   K-tile of the 128x128 tiles (unrolled, they spill) run one per iteration.
// Grid: x = ceil(M / BM), y = ceil(Kg / BN), z = groups of this launch (g0 + z).
#include "implicit_gemm_parts.cuh"
#include "channels_last_rows.cuh"      // channels_last_tap_offset
#include "../common/swizzle.cuh"

namespace cc {

/// What a thread's copies need to find its rows at a tap (set once, read by tap_sources).
template <typename T, typename Index>
struct TapArgs {
  const T* x;
  const T* w;
  Index m;       ///< the thread's A row (GEMM row; a valid one for rows past M)
  Index g;       ///< group
  Index w_row;   ///< the thread's B row offset in w (output channel, group)
  int a_first;   ///< element offset of the thread's first A chunk in its row
  int b_first;   ///< ... and of its first B chunk
  bool a_row;    ///< the A row is inside the GEMM (else its copies zero-fill from x)
};

/// Where a thread's copies start at a weight tap: its A chunks, whether they are
/// constant padding (store cval), its B chunks.
template <typename T>
struct TapSources {
  const T* a;
  const T* b;
  bool pad;
};

/// TapSources at tap `tap`: one call per crossed tap, so the hot loop keeps only the call
/// (the arguments stay in the caller's frame).
template <int R, typename T, typename Index>
__device__ __noinline__ TapSources<T> tap_sources(const ConvParams<R>& p, const TapArgs<T, Index>& a,
                                                  Index tap) {
  const TapOffset<Index> t = channels_last_tap_offset(p, a.m, a.g, tap);
  return {a.a_row ? a.x + t.off + a.a_first : a.x, a.w + weight_tap_offset(p, a.w_row, tap) + a.b_first,
          a.a_row && !t.inside};
}

/// 16 bytes, the unit of the copies and of a swizzled chunk.
struct alignas(16) Chunk16 {
  unsigned v[4];
};

}  // namespace cc

template <typename T, typename Acc, int R, typename Index, int BM, int BN, int BK, int kStages>
__global__ void __launch_bounds__(CUPYCONV_MULTISTAGE_THREADS, 2)
implicit_gemm_multistage(const __grid_constant__ cc::ConvParams<R> p, const T* __restrict__ x,
                         const T* __restrict__ w, T* __restrict__ y, const T* __restrict__ bias) {
  // Types and tile geometry ---------------------------------------------------
  using Atom = typename cc::MmaAtomFor<T>::type;
  static_assert(cc::IsIndexType<Index>::value, "Index must be int or long long");
  static_assert(cc::MmaAtomFor<T>::kDefined && (sizeof(T) == 4 || sizeof(T) == 2) && sizeof(Acc) == 4,
                "the multistage tiles take float (TF32 atom), float16 or bfloat16, float accumulation");
  constexpr int kThreads = CUPYCONV_MULTISTAGE_THREADS;
  constexpr int kWarpsM = 2, kWarpsN = kThreads / 32 / kWarpsM;
  constexpr int WM = BM / kWarpsM, WN = BN / kWarpsN;        ///< warp tile
  constexpr int AM = WM / Atom::kM, AN = WN / Atom::kN;      ///< atoms per warp tile
  constexpr int kChunk = 16 / static_cast<int>(sizeof(T));   ///< elements per 16-byte chunk
  constexpr int kKSteps = BK / Atom::kK;                     ///< warp k-steps per K-tile
  constexpr int kRowBytes = 128, kRowChunks = 8;             ///< a swizzled row: one K-tile
  constexpr int kAChunks = kRowChunks * BM / kThreads;       ///< chunks a thread copies of A
  constexpr int kBChunks = kRowChunks * BN / kThreads;       ///< ... and of B per K-tile
  constexpr int kAStageBytes = BM * kRowBytes;
  constexpr int kStageBytes = (BM + BN) * kRowBytes;
  // byte offset of logical 16-byte chunk c of row r (Swizzle128B's mapping)
  auto sw = [](int r, int c) { return cc::swizzle128_chunk_offset(r, c); };
  static_assert(kThreads == 32 * kWarpsM * kWarpsN && kWarpsN >= 1, "4 warps as 2 x 2");
  static_assert(BK * static_cast<int>(sizeof(T)) == kRowBytes,
                "a K-tile is one 128-byte swizzled row: BK = 32 (TF32) or 64 (16-bit types)");
  static_assert(Atom::kK == 2 * kChunk, "an atom's k-step is two 16-byte chunks (ldmatrix.x4 of A)");
  static_assert(WM % Atom::kM == 0 && WN % (2 * Atom::kN) == 0,
                "warp tile: whole A atoms and pairs of B atoms (ldmatrix.x4)");
  static_assert(kThreads % BM == 0 && kThreads % BN == 0 && kAChunks >= 1 && kBChunks >= 1,
                "one or more threads per A row and per B row, whole chunks each");
  static_assert(kKSteps % 2 == 0, "the fragment double buffer restarts at buffer 0 each K-tile");
  static_assert(kStages >= 3 && kStages <= 5, "3 to 5 stages");

  cc::require_block_threads<kThreads>();
  CUPYCONV_DYNAMIC_SHARED(unsigned char, smem);   // kStages x kStageBytes (the host sizes it)

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const cc::GemmBlock<Index> blk(p, BM, BN);
  const Index g = blk.g, M = blk.M, Kg = blk.Kg, block_m = blk.block_m, block_n = blk.block_n;
  const Index w_stride_k = static_cast<Index>(p.w_stride_k);

  // Copier: thread t copies chunks a_c0.. of A row t % BM (GEMM row) and b_c0.. of B row
  // t % BN (output channel): one tap offset per thread per tap --------------------
  const int a_r = tid % BM, a_c0 = (tid / BM) * kAChunks;
  const int b_r = tid % BN, b_c0 = (tid / BN) * kBChunks;
  const bool a_row = block_m + a_r < M;   // inside the GEMM (else zero-filled)
  const bool b_col = block_n + b_r < Kg;
  const cc::TapArgs<T, Index> tap_args{x, w, block_m + (a_row ? a_r : 0), g,
                                        (g * Kg + block_n + b_r) * w_stride_k, a_c0 * kChunk,
                                        b_c0 * kChunk, a_row};
  const T* a_ptr = x;                // the row's channels at the producer's K-tile
  bool a_pad = false;                // constant padding there: store cval
  const T* b_ptr = w;                // the column's weights at that K-tile
  cc::Chunk16 fill;                  // a chunk of cval (TF32: rounded, as the operands)
  {
    T* f = reinterpret_cast<T*>(&fill);
    const T cval = cc::to_stage<T, sizeof(T) == 4>(cc::make_scalar<T>(p.cval_re, p.cval_im));
#pragma unroll
    for (int e = 0; e < kChunk; ++e) f[e] = cval;
  }
  auto set_tap = [&](Index tap) {    // once per tap, out of line
    const cc::TapSources<T> t = cc::tap_sources(p, tap_args, tap);
    a_ptr = t.a;
    b_ptr = t.b;
    a_pad = t.pad;
  };
  // The producer's K-tile: channel tile p_ct (of blk.cpg / BK) of tap p_tap; the pointers
  // advance by BK per K-tile and are set anew per tap (past the last tap they run on,
  // at most kStages - 1 K-tiles, and copy nothing).
  const int ctiles = static_cast<int>(blk.cpg / BK);
  int p_left = ctiles;
  Index p_tap = 0;
  auto advance = [&]() {
    a_ptr += BK;
    b_ptr += BK;
    if (--p_left == 0) {
      p_left = ctiles;
      if (++p_tap < blk.taps) set_tap(p_tap);
    }
  };
  // Shared offsets of this thread's copy chunks (stage 0)
  int a_dst[kAChunks], b_dst[kBChunks];
#pragma unroll
  for (int j = 0; j < kAChunks; ++j) a_dst[j] = sw(a_r, a_c0 + j);
#pragma unroll
  for (int j = 0; j < kBChunks; ++j) b_dst[j] = kAStageBytes + sw(b_r, b_c0 + j);
  // Part `part` of the producer's K-tile into stage `stage` (part p: the p-th run of a
  // thread's chunks, whole 32-byte sectors where it has 2 chunks per part); `live` false
  // (past the last K-tile): zero-fills a stage no k-step reads, so the loop has one path.
  auto issue = [&](int stage, int part, bool live) {
    unsigned char* st = smem + stage * kStageBytes;
#pragma unroll
    for (int j = 0; j < kAChunks; ++j) {
      if (j * kKSteps / kAChunks != part) continue;
      void* dst = st + a_dst[j];
      if (a_pad) {
        *static_cast<cc::Chunk16*>(dst) = fill;
      } else {
        cc::cp_async_zfill<16>(dst, a_ptr + j * kChunk, (live && a_row) ? 16 : 0);
      }
    }
#pragma unroll
    for (int j = 0; j < kBChunks; ++j) {
      if (j * kKSteps / kBChunks != part) continue;
      cc::cp_async_zfill<16>(st + b_dst[j], b_ptr + j * kChunk, (live && b_col) ? 16 : 0);
    }
  };

  // Fragments: lane l gives row l % 8 of matrix q = l / 8; A's .x4 = rows +8 (q & 1),
  // chunk +(q >> 1) (the atom's a0..a3); B's .x4 = atom +(q >> 1), chunk +(q & 1) ------
  const int wm0 = (warp % kWarpsM) * WM, wn0 = (warp / kWarpsM) * WN;
  const int q = lane >> 3, r8 = lane & 7;
  int a_ld[kKSteps], b_ld[kKSteps];  // byte offsets of this lane's rows per k-step
#pragma unroll
  for (int ks = 0; ks < kKSteps; ++ks) {
    a_ld[ks] = sw(wm0 + 8 * (q & 1) + r8, 2 * ks + (q >> 1));
    b_ld[ks] = kAStageBytes + sw(wn0 + 8 * (q >> 1) + r8, 2 * ks + (q & 1));
  }
  typename Atom::FragA fa[2][AM];
  typename Atom::FragB fb[2][AN];
  auto load_frags = [&](int buf, int stage, int ks) {
    const unsigned char* s = smem + stage * kStageBytes;
#pragma unroll
    for (int i = 0; i < AM; ++i) cc::ldmatrix<4>(fa[buf][i], s + a_ld[ks] + i * Atom::kM * kRowBytes);
#pragma unroll
    for (int j = 0; j < AN; j += 2) {
      unsigned t[4];
      cc::ldmatrix<4>(t, s + b_ld[ks] + j * Atom::kN * kRowBytes);
      fb[buf][j][0] = t[0];
      fb[buf][j][1] = t[1];
      fb[buf][j + 1][0] = t[2];
      fb[buf][j + 1][1] = t[3];
    }
  };
  typename Atom::FragC acc[AM][AN];
  cc::zero_accumulators(acc);

  // Main loop ---------------------------------------------------------------
  if constexpr (cc::kHasMma) {
    const Index slices = blk.taps * ctiles;
    set_tap(0);
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) {
#pragma unroll
      for (int part = 0; part < kKSteps; ++part) issue(st, part, st < slices);
      advance();
      cc::cp_async_commit();
    }
    cc::cp_async_wait_group<kStages - 2>();
    __syncthreads();
    load_frags(0, 0, 0);
    // One K-tile: math on stage `read`, its copies refill stage `write` (K-tile
    // sl + kStages - 1, zero-filled past the last: `live` false).
    auto ktile = [&](int read, int write, bool live) {
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) {
        if (ks + 1 < kKSteps) load_frags((ks + 1) & 1, read, ks + 1);
        issue(write, ks, live);
        if (ks == kKSteps - 1) {             // K-tile sl + 1 landed; stage `read` is free
          advance();
          cc::cp_async_commit();
          cc::cp_async_wait_group<kStages - 2>();
          __syncthreads();
          load_frags(0, read + 1 == kStages ? 0 : read + 1, 0);
        }
#pragma unroll
        for (int i = 0; i < AM; ++i)
#pragma unroll
          for (int j = 0; j < AN; ++j) Atom::mma(acc[i][j], fa[ks & 1][i], fb[ks & 1][j], acc[i][j]);
      }
    };
    // The small tiles' hot loop: kStages K-tiles, so every stage index (and with it every
    // shared address) is a constant; the 128x128 tiles' registers do not allow it (the
    // unrolled loop spills), they run the K-tiles one at a time, as do the small tiles'
    // last slices % kStages.
    constexpr bool kUnrollStages = BM * BN <= 64 * 64;
    Index sl = 0;
    if constexpr (kUnrollStages) {
      for (; sl + kStages <= slices; sl += kStages) {
#pragma unroll
        for (int u = 0; u < kStages; ++u)
          ktile(u, (u + kStages - 1) % kStages, sl + u + (kStages - 1) < slices);
      }
    }
    for (int read = 0; sl < slices; ++sl) {
      ktile(read, read == 0 ? kStages - 1 : read - 1, sl + (kStages - 1) < slices);
      read = read + 1 == kStages ? 0 : read + 1;
    }
    cc::cp_async_wait_all();
  } else {
    cc::require(false, "the multistage implicit GEMM needs sm_80 or newer");
  }

  // Epilogue: y in the caller's layout, one output position per fragment row -----
  const cc::Epilogue<T, Acc> epilogue(p);
  const Index y_stride_k = static_cast<Index>(p.y_stride_k);
#pragma unroll
  for (int i = 0; i < AM; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {   // C rows g and g + 8 of the atom (c_coord's i >> 1)
      const Index m = block_m + wm0 + i * Atom::kM + Atom::c_coord(lane, 2 * h).row;
      if (m >= M) continue;
      cc::OutputPosition<R, Index> pos;
      pos.set(p, m);
      const Index y_row = pos.y_offset(p, Index(0));
#pragma unroll
      for (int j = 0; j < AN; ++j)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          const Index col = block_n + wn0 + j * Atom::kN + Atom::c_coord(lane, e).col;
          if (col < Kg) {
            const Index k = g * Kg + col;
            epilogue(y, y_row + k * y_stride_k, bias, k, acc[i][j][e]);
          }
        }
    }
}
