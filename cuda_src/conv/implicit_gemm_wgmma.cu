// cupyconv: the warp-specialised warpgroup-MMA (wgmma) implicit GEMM for sm_90a, issue 27.
//
// The GEMM and the operands are the multistage kernel's (implicit_gemm_multistage.cu): per
// group Y_g[M x Kg] = A_g[M x Kr] * B_g[Kr x Kg], GEMM-K ordered (tap, channel), on
// channels-last x (N, *S, C) and channel-contiguous w (K, *KS, C/G): both channel strides
// 1, every other stride and both start addresses multiples of 16 bytes, C/G a multiple of
// BK (the host checks: _kernels/wgmma_launch.py wgmma_reason).  y may have any strides.
// float (TF32 operands, rounded beforehand: the loop never rounds), float16, bfloat16;
// float32 accumulation in registers.  An arch-specific family (registry: arch_specific
// ("sm_90a",)): the wgmma instructions exist only there and in the CPU emulator.
//
// Block: 3 warpgroups (384 threads).  Warpgroup 0 is the producer, 1 and 2 the consumers
// (CUTLASS sm90_implicit_gemm_gmma_ss_warpspecialized, with cp.async in place of TMA,
// whose im2col mode stops at 3 spatial dimensions).
// * A K-tile is BK channels of one tap: 128 bytes of every A row (GEMM row m) and every B
//   row (output channel n): BK = 32 for TF32, 64 for 16-bit types.  kStages K-tiles live
//   in dynamic shared memory (aligned up to 1024 bytes, the 128-byte swizzle's pattern),
//   each as [BM rows][128 B] of A then [BN rows][128 B] of B with 16-byte chunk u of row r
//   stored at chunk u ^ (r % 8) (common/swizzle.cuh Swizzle128B): exactly the K-major
//   128-byte-swizzled layout a wgmma descriptor describes (SBO 1024 bytes: 8 rows).
// * Producer thread t copies A row t (8 chunks) and its share of B row t % BN
//   (conv/channels_last_rows.cuh: one tap offset per row per tap, out of line) with
//   16-byte cp.async (zero-filled past the GEMM's rows or columns; constant padding
//   stores cval), one cp.async group per K-tile.  K-tile kt waits for the stage's `empty`
//   barrier (its previous K-tile released by both consumers); after committing kt the
//   thread waits for its K-tile kt - kLag to land, fences it to the async proxy
//   (fence.proxy.async) and arrives on that stage's `full` barrier (128 arrivals).
// * Consumer warpgroup c computes rows 64c .. 64c + 63 of the tile: per K-tile it waits on
//   `full`, then wgmma.fence, BK / k (4) wgmma m64nBNk16 (f16, bf16) or m64nBNk8 (TF32)
//   from descriptors advanced 32 bytes per k-step inside the swizzled rows, one commit;
//   wait_group 1 leaves that batch in flight and completes the previous K-tile's, whose
//   stage is then released (256 arrivals on `empty`).  No calls in the consumer loop (a
//   call would make ptxas serialise the wgmma).
// * Epilogue: the usual one (alpha, beta, bias, cval), y in the caller's layout; register
//   i of thread x holds D(16 (x / 32) + (x % 32) / 4 + 8 ((i >> 1) & 1), 8 (i / 4) + 2 (x % 4)
//   + (i & 1)) (cc::WgmmaFragment::d).
// Grid: x = ceil(M / BM), y = ceil(Kg / BN), z = groups of this launch (g0 + z).
#include "channels_last_rows.cuh"
#include "../common/swizzle.cuh"
#include "../common/wgmma.cuh"

/// Threads per block: a producer warpgroup and two consumer warpgroups (the host reads it).
#define CUPYCONV_WGMMA_THREADS 384

namespace cc {

/// The wgmma element type of a storage type (float: TF32).
template <typename T> struct WgmmaTypeOf { static constexpr int value = 0; };
template <> struct WgmmaTypeOf<float> { static constexpr int value = kWgmmaTF32; };
template <> struct WgmmaTypeOf<half> { static constexpr int value = kWgmmaF16; };
template <> struct WgmmaTypeOf<bfloat16> { static constexpr int value = kWgmmaBF16; };

/// Byte offset of 16-byte chunk `u` of row `r` in a stage of 128-byte rows (Swizzle128B).
template <int Bytes>
CC_DEVICE CC_CONSTEXPR int wg_chunk_offset(int r, int u) {
  using Sw = typename Swizzle128B<Bytes>::type;
  return Bytes * Sw::apply((r * 128 + u * 16) / Bytes);
}

}  // namespace cc

template <typename T, typename Acc, int R, typename Index, int BM, int BN, int BK, int kStages>
__global__ void __launch_bounds__(CUPYCONV_WGMMA_THREADS, 1)
implicit_gemm_wgmma(const __grid_constant__ cc::ConvParams<R> p, const T* __restrict__ x,
                    const T* __restrict__ w, T* __restrict__ y, const T* __restrict__ bias) {
  // Types and tile geometry ---------------------------------------------------
  constexpr int kType = cc::WgmmaTypeOf<T>::value;
  constexpr int kThreads = CUPYCONV_WGMMA_THREADS;
  constexpr int kRowBytes = 128;                              ///< a K-tile row: 8 chunks
  constexpr int kChunk = 16 / static_cast<int>(sizeof(T));   ///< elements per chunk
  constexpr int kK = kType == cc::kWgmmaTF32 ? 8 : 16;        ///< K of one wgmma
  constexpr int kKSteps = BK / kK;                            ///< wgmma per K-tile
  constexpr int kKStepBytes = kK * static_cast<int>(sizeof(T));
  constexpr int kAChunks = 8 * BM / 128;                      ///< chunks a producer copies of A
  constexpr int kBChunks = 8 * BN / 128;                      ///< ... and of B per K-tile
  constexpr int kAStageBytes = BM * kRowBytes;
  constexpr int kStageBytes = (BM + BN) * kRowBytes;
  constexpr int kLag = kStages - 2;                           ///< K-tiles a producer keeps copying
  static_assert(cc::IsIndexType<Index>::value, "Index must be int or long long");
  static_assert(kType != 0 && sizeof(Acc) == 4, "the wgmma tiles take float (TF32), float16 or "
                "bfloat16 operands with float accumulation");
  static_assert(BK * static_cast<int>(sizeof(T)) == kRowBytes,
                "a K-tile is one 128-byte swizzled row: BK = 32 (TF32) or 64 (16-bit types)");
  static_assert(BM == 128, "two consumer warpgroups of 64 rows (wgmma's M)");
  static_assert(BN % 8 == 0 && BN >= 8 && BN <= 128 && 128 % BN == 0 && kBChunks >= 1,
                "BN: wgmma's N, a divisor of the producer's 128 threads (one B row per thread or a share)");
  static_assert(kAChunks == 8, "one A row per producer thread");
  static_assert(kKSteps * kKStepBytes == kRowBytes, "the k-steps cover the 128-byte row");
  static_assert(kStageBytes % 1024 == 0 && kAStageBytes % 1024 == 0,
                "stages and their B halves start on the swizzle's 1024-byte pattern");
  static_assert(kStages >= 3 && kStages <= 6, "3 to 6 stages");

  cc::require_block_threads<kThreads>();
  CUPYCONV_DYNAMIC_SHARED(unsigned char, raw);   // 1024 + kStages x kStageBytes (the host sizes it)
  CUPYCONV_STATIC_SHARED(unsigned long long, bars, [2 * kStages]);
  unsigned char* const smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<unsigned long long>(raw) + 1023ull) & ~1023ull);
  unsigned long long* const full = bars;             // producer -> consumers: K-tile landed
  unsigned long long* const empty = bars + kStages;  // consumers -> producer: stage free

  const int tid = static_cast<int>(threadIdx.x);
  const int wg = tid / 128, x_in = tid % 128;
  const cc::GemmBlock<Index> blk(p, BM, BN);
  const Index g = blk.g, M = blk.M, Kg = blk.Kg, block_m = blk.block_m, block_n = blk.block_n;
  const Index slices = blk.taps * (blk.cpg / BK);
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      cc::mbarrier_init(&full[s], 128);
      cc::mbarrier_init(&empty[s], 256);
    }
  }
  __syncthreads();

  if constexpr (!cc::kHasWgmma) {
    cc::require(false, "the wgmma implicit GEMM needs sm_90a");
  } else if (wg == 0) {
    // Producer ----------------------------------------------------------------
    const int a_r = x_in, b_r = x_in % BN, b_c0 = (x_in / BN) * kBChunks;
    cc::ChannelsLastRows<T, R, Index> rows(p, x, w, block_m + a_r, M, g, block_n + b_r, Kg);
    auto publish = [&](Index kt) {          // K-tile kt landed: to the async proxy, then arrive
      cc::fence_proxy_async();
      cc::mbarrier_arrive(&full[static_cast<int>(kt % kStages)]);
    };
    Index tap = 0, c0 = 0;
    rows.set_tap(p, x, w, 0);
    for (Index kt = 0; kt < slices; ++kt) {
      const int stage = static_cast<int>(kt % kStages);
      if (kt >= kStages) cc::mbarrier_wait_parity(&empty[stage], static_cast<unsigned>((kt / kStages - 1) & 1));
      unsigned char* sa = smem + stage * kStageBytes;
      unsigned char* sb = sa + kAStageBytes;
      const T* a_tile = rows.a_src + c0;
      const T* b_tile = rows.b_src + c0 + b_c0 * kChunk;
#pragma unroll
      for (int j = 0; j < kAChunks; ++j) {
        void* dst = sa + cc::wg_chunk_offset<sizeof(T)>(a_r, j);
        if (rows.a_pad) {
          *static_cast<cc::CopyChunk16*>(dst) = rows.fill;
        } else {
          cc::cp_async_zfill<16>(dst, a_tile + j * kChunk, rows.a_row ? 16 : 0);
        }
      }
#pragma unroll
      for (int j = 0; j < kBChunks; ++j)
        cc::cp_async_zfill<16>(sb + cc::wg_chunk_offset<sizeof(T)>(b_r, b_c0 + j), b_tile + j * kChunk,
                               rows.b_col ? 16 : 0);
      cc::cp_async_commit();
      c0 += BK;
      if (c0 == blk.cpg) {
        c0 = 0;
        if (++tap < blk.taps) rows.set_tap(p, x, w, tap);
      }
      cc::cp_async_wait_group<kLag>();      // K-tile kt - kLag landed
      if (kt >= kLag) publish(kt - kLag);
    }
    cc::cp_async_wait_all();
    for (Index kt = slices > kLag ? slices - kLag : 0; kt < slices; ++kt) publish(kt);
  } else {
    // Consumers -----------------------------------------------------------------
    const int c = wg - 1;                   // rows 64c .. 64c + 63 of the tile
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    const unsigned long long da0 = cc::wgmma_desc(smem + c * 64 * kRowBytes, 16, 8 * kRowBytes,
                                                  cc::kWgmmaSwizzle128B);
    const unsigned long long db0 = cc::wgmma_desc(smem + kAStageBytes, 16, 8 * kRowBytes,
                                                  cc::kWgmmaSwizzle128B);
    for (Index kt = 0; kt < slices; ++kt) {  // the hot loop: one K-tile
      const int stage = static_cast<int>(kt % kStages);
      cc::mbarrier_wait_parity(&full[stage], static_cast<unsigned>((kt / kStages) & 1));
      const unsigned long long da = cc::wgmma_desc_advance(da0, stage * kStageBytes);
      const unsigned long long db = cc::wgmma_desc_advance(db0, stage * kStageBytes);
      cc::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks)
        cc::wgmma<kType, BN>(acc, cc::wgmma_desc_advance(da, ks * kKStepBytes),
                             cc::wgmma_desc_advance(db, ks * kKStepBytes), 1);
      cc::wgmma_commit_group();
      cc::wgmma_wait_group<1>();            // the previous K-tile's batch completed
      if (kt > 0) cc::mbarrier_arrive(&empty[static_cast<int>((kt - 1) % kStages)]);
    }
    cc::wgmma_wait_group<0>();

    // Epilogue: y in the caller's layout, two output positions per thread ------------
    const cc::Epilogue<T, Acc> epilogue(p);
    const Index y_stride_k = static_cast<Index>(p.y_stride_k);
#pragma unroll
    for (int h = 0; h < 2; ++h) {           // D rows g and g + 8 of the warp's 16
      const Index m = block_m + 64 * c + cc::WgmmaFragment::d(x_in, 2 * h).row;
      if (m >= M) continue;
      cc::OutputPosition<R, Index> pos;
      pos.set(p, m);
      const Index y_row = pos.y_offset(p, Index(0));
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int i = 4 * j + 2 * h + e;
          const Index col = block_n + cc::WgmmaFragment::d(x_in, i).col;
          if (col < Kg) {
            const Index k = g * Kg + col;
            epilogue(y, y_row + k * y_stride_k, bias, k, acc[i]);
          }
        }
    }
  }
}
