// Test kernels for the warpgroup MMA API (cuda_src/common/wgmma.cuh) under the emulator
// (tests/emulation/test_emu_wgmma.py) and NVRTC for sm_90a (the same file compiles there).
//
// The host builds the shared-memory image of A and B in the layout it wants (its own
// formulation of the canonical layouts and swizzles) and the descriptors' fields; the
// kernels copy the image into 1024-aligned shared memory, run the wgmma and store D through
// cc::WgmmaFragment::d.  `bug` plants one mistake (see kBug*).
#include "platform.cuh"
#include "common/cp_async.cuh"
#include "common/wgmma.cuh"

namespace {

// meta[]: for A (0..5) and B (6..11): offset in the image, LBO, SBO, swizzle, base offset,
// bytes the start advances per K step; 12: K steps; 13: scale_d of the first step; 14: bug;
// 15: image bytes.
constexpr int kBugNone = 0;
constexpr int kBugNoProxyFence = 1;    // no fence.proxy.async after the copy
constexpr int kBugEarlyRead = 2;       // D stored before the wait_group
constexpr int kBugSwapRegs = 3;        // accumulator registers 0 and 1 stored swapped
constexpr int kBugOverwrite = 4;       // B overwritten between the wgmma and its wait
constexpr int kBugNoWgmmaFence = 5;    // no wgmma.fence before the wgmma
constexpr int kBugNoWait = 6;          // no wait_group at all
constexpr int kBugCpAsyncLate = 7;     // the image staged by cp.async, landing after the fence
constexpr int kCpAsync = 8;            // (no bug) staged by cp.async, waited for, then fenced
constexpr int kGroupPerStep = 9;       // one commit per K step; D stored after wait_group<1>

CC_DEVICE unsigned char* align1024(unsigned char* p) {
  const auto u = reinterpret_cast<unsigned long long>(p);
  return reinterpret_cast<unsigned char*>((u + 1023ull) & ~1023ull);
}

/// Copies the image to 1024-aligned shared memory and makes it visible to the async proxy.
CC_DEVICE unsigned char* stage_image(const uint4* image, const int* meta) {
  CUPYCONV_DYNAMIC_SHARED(unsigned char, raw);
  unsigned char* smem = align1024(raw);
  const int how = meta[14];
  if (how == kBugCpAsyncLate || how == kCpAsync) {
    for (int i = threadIdx.x; i < meta[15] / 16; i += blockDim.x) cc::cp_async<16>(smem + 16 * i, image + i);
    if (how == kCpAsync) cc::cp_async_wait_all();
    cc::fence_proxy_async();
    if (how == kBugCpAsyncLate) cc::cp_async_wait_all();
    __syncthreads();
    return smem;
  }
  for (int i = threadIdx.x; i < meta[15] / 16; i += blockDim.x) reinterpret_cast<uint4*>(smem)[i] = image[i];
  __syncthreads();
  if (how != kBugNoProxyFence) cc::fence_proxy_async();
  __syncthreads();
  return smem;
}

template <int N>
CC_DEVICE void store_d(const float (&acc)[N / 2], float* out, int bug) {
  const int x = threadIdx.x % 128;
  for (int i = 0; i < N / 2; ++i) {
    const int j = bug == kBugSwapRegs && i < 2 ? 1 - i : i;
    const cc::MmaCoord p = cc::WgmmaFragment::d(x, j);
    out[p.row * N + p.col] = acc[i];
  }
}

template <int N>
CC_DEVICE void load_c(float (&acc)[N / 2], const float* c) {
  const int x = threadIdx.x % 128;
  for (int i = 0; i < N / 2; ++i) {
    const cc::MmaCoord p = cc::WgmmaFragment::d(x, i);
    acc[i] = c[p.row * N + p.col];
  }
}

template <int N>
CC_DEVICE void finish(float (&acc)[N / 2], unsigned char* smem, const int* meta, float* out) {
  const int bug = meta[14];
  cc::wgmma_commit_group();
  if (bug == kBugOverwrite && threadIdx.x == 0) smem[meta[6]] ^= 0x40;
  if (bug == kBugEarlyRead) store_d<N>(acc, out, bug);
  if (bug != kBugNoWait) cc::wgmma_wait_group<0>();
  if (bug != kBugEarlyRead) store_d<N>(acc, out, bug);
}

}  // namespace

/// D (64 x N) = A (64 x K) * B (N x K)^T + C, A and B from the shared-memory image.
template <int Type, int N, int TA, int TB>
__global__ void wg_ss(const uint4* image, const int* meta, const float* c, float* out) {
  unsigned char* smem = stage_image(image, meta);
  float acc[N / 2];
  load_c<N>(acc, c);
  if (meta[14] != kBugNoWgmmaFence) cc::wgmma_fence();
  const unsigned long long da = cc::wgmma_desc(smem + meta[0], meta[1], meta[2], meta[3], meta[4]);
  const unsigned long long db = cc::wgmma_desc(smem + meta[6], meta[7], meta[8], meta[9], meta[10]);
  for (int s = 0; s < meta[12]; ++s) {
    cc::wgmma<Type, N, TA, TB>(acc, cc::wgmma_desc_advance(da, s * meta[5]),
                               cc::wgmma_desc_advance(db, s * meta[11]), s == 0 ? meta[13] : 1);
    if (meta[14] == kGroupPerStep) cc::wgmma_commit_group();
  }
  if (meta[14] == kGroupPerStep) {  // the newest group still writes acc: it reads as in flight
    cc::wgmma_wait_group<1>();
    store_d<N>(acc, out, 0);
    cc::wgmma_wait_group<0>();
    return;
  }
  finish<N>(acc, smem, meta, out);
}

/// The same with A from registers: a_regs holds each thread's 4 registers per K step.
template <int Type, int N, int TB>
__global__ void wg_rs(const unsigned* a_regs, const uint4* image, const int* meta, const float* c,
                      float* out) {
  unsigned char* smem = stage_image(image, meta);
  float acc[N / 2];
  load_c<N>(acc, c);
  cc::wgmma_fence();
  const unsigned long long db = cc::wgmma_desc(smem + meta[6], meta[7], meta[8], meta[9], meta[10]);
  for (int s = 0; s < meta[12]; ++s) {
    unsigned a[4];
    for (int i = 0; i < 4; ++i) a[i] = a_regs[(s * 128 + threadIdx.x) * 4 + i];
    cc::wgmma_rs<Type, N, TB>(acc, a, cc::wgmma_desc_advance(db, s * meta[11]), s == 0 ? meta[13] : 1);
  }
  finish<N>(acc, smem, meta, out);
}

/// cc::WgmmaFragment's maps for every thread: out[x][i] = (row, col) of D (i < 8), A f16
/// (8 halves) and A tf32 (4 registers).
__global__ void wg_fragment_maps(int* out) {
  const int x = threadIdx.x;
  for (int i = 0; i < 8; ++i) {
    const cc::MmaCoord d = cc::WgmmaFragment::d(x, i), a = cc::WgmmaFragment::a16(x, i);
    out[(x * 20 + i) * 2] = d.row;
    out[(x * 20 + i) * 2 + 1] = d.col;
    out[(x * 20 + 8 + i) * 2] = a.row;
    out[(x * 20 + 8 + i) * 2 + 1] = a.col;
  }
  for (int i = 0; i < 4; ++i) {
    const cc::MmaCoord a = cc::WgmmaFragment::a_tf32(x, i);
    out[(x * 20 + 16 + i) * 2] = a.row;
    out[(x * 20 + 16 + i) * 2 + 1] = a.col;
  }
}

/// Producer-consumer over one stage: warpgroup 1 copies K step s of the image into the
/// stage and signals `full` (one expect-tx arrival, each producer completing its bytes);
/// warpgroup 0 waits on `full`, runs the wgmma and releases the stage on `empty`.  Each K
/// step's A and B (16-bit, K-major, 128-byte swizzle) are `meta[15]` bytes of the image.
/// bug 1: the producer does not wait for `empty` (overwrites a stage in use);
/// bug 2: nobody arrives on `full` (the consumer's wait never completes).
template <int N>
__global__ void wg_pipeline(const uint4* image, const int* meta, float* out) {
  CUPYCONV_DYNAMIC_SHARED(unsigned char, raw);
  unsigned char* stage = align1024(raw);
  CUPYCONV_STATIC_SHARED(unsigned long long, bars, [2]);
  unsigned long long* full = &bars[0];
  unsigned long long* empty = &bars[1];
  const int bug = meta[14], steps = meta[12], bytes = meta[15];
  if (threadIdx.x == 0) {
    cc::mbarrier_init(full, 1);
    cc::mbarrier_init(empty, 128);
  }
  __syncthreads();
  if (threadIdx.x >= 128) {  // producer
    const int p = threadIdx.x - 128;
    for (int s = 0; s < steps; ++s) {
      if (s > 0 && bug != 1) cc::mbarrier_wait_parity(empty, static_cast<unsigned>(s - 1) & 1u);
      if (p == 0 && bug != 2) cc::mbarrier_arrive_expect_tx(full, static_cast<unsigned>(bytes));
      unsigned mine = 0;
      for (int i = p; i < bytes / 16; i += 128) {
        reinterpret_cast<uint4*>(stage)[i] = image[s * (bytes / 16) + i];
        mine += 16;
      }
      cc::fence_proxy_async();
      if (bug != 2) cc::mbarrier_complete_tx(full, mine);
    }
  } else {  // consumer
    float acc[N / 2];
    for (int i = 0; i < N / 2; ++i) acc[i] = 0.0f;
    const unsigned long long da = cc::wgmma_desc(stage + meta[0], meta[1], meta[2], meta[3], meta[4]);
    const unsigned long long db = cc::wgmma_desc(stage + meta[6], meta[7], meta[8], meta[9], meta[10]);
    for (int s = 0; s < steps; ++s) {
      cc::mbarrier_wait_parity(full, static_cast<unsigned>(s) & 1u);
      cc::wgmma_fence();
      cc::wgmma<cc::kWgmmaF16, N>(acc, da, db, 1);
      cc::wgmma_commit_group();
      cc::wgmma_wait_group<0>();
      cc::mbarrier_arrive(empty);
    }
    store_d<N>(acc, out, 0);
  }
}
