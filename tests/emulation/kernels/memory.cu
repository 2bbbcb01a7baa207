// Emulator test kernels for shared-memory poisoning, cp.async and fused multiply-add,
// each with a planted bug the emulator must expose.
#include "platform.cuh"
#include "common/cp_async.cuh"
#include "common/types.cuh"

// --- static shared memory --------------------------------------------------------------

// Planted bug: only block 0 fills the array; every other block reads what it never
// wrote.  The emulator poisons the array per block, so blocks > 0 read 0xCD bytes
// instead of block 0's values.
__global__ void stale_static_shared(float* y) {
  CUPYCONV_STATIC_SHARED(float, s, [64]);
  if (blockIdx.x == 0) s[threadIdx.x] = 1.0f + static_cast<float>(threadIdx.x);
  __syncthreads();
  y[blockIdx.x * blockDim.x + threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

// Correct: every block fills the array before reading it.
__global__ void fresh_static_shared(float* y) {
  CUPYCONV_STATIC_SHARED(float, s, [64]);
  s[threadIdx.x] = static_cast<float>(blockIdx.x * 100 + threadIdx.x);
  __syncthreads();
  y[blockIdx.x * blockDim.x + threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

// A declaration reached twice in one block is poisoned once: the second call reads
// what the first call wrote.
__device__ float stash_or_load(bool store, float v) {
  CUPYCONV_STATIC_SHARED(float, s, [32]);
  if (store) s[threadIdx.x] = v;
  __syncthreads();
  return s[threadIdx.x];
}
__global__ void static_shared_twice(float* y) {
  stash_or_load(true, 7.0f + static_cast<float>(threadIdx.x));
  y[blockIdx.x * blockDim.x + threadIdx.x] = stash_or_load(false, 0.0f);
}

// --- cp.async ----------------------------------------------------------------------------

// Each thread copies 16 bytes into the dynamic shared memory, then reads its
// neighbour's.  Planted bug with kWait = false: no cp.async.wait before the barrier.
template <bool kWait>
__global__ void cp_async_neighbour(const float* x, float* y) {
  CUPYCONV_DYNAMIC_SHARED(float, s);  // 4 * blockDim.x floats
  const unsigned t = threadIdx.x, base = 4 * (blockIdx.x * blockDim.x + t);
  cc::cp_async<16>(s + 4 * t, x + base);
  cc::cp_async_commit();
  if (kWait) cc::cp_async_wait_all();
  __syncthreads();
  const unsigned u = (t + 1) % blockDim.x;
  for (int j = 0; j < 4; ++j) y[base + j] = s[4 * u + j];
}

// Two committed groups into a CUPYCONV_STATIC_SHARED array: wait_group<1> lands the
// first only.  y[0..2] per thread: stage 0 after wait_group<1>, stage 1 after
// wait_group<1> (still in flight: poisoned), stage 1 after wait_group<0>.
__global__ void cp_async_two_groups(const float* x, float* y) {
  CUPYCONV_STATIC_SHARED(float, s, [2][32]);
  const unsigned t = threadIdx.x;
  cc::cp_async<4>(&s[0][t], x + t);
  cc::cp_async_commit();
  cc::cp_async<4>(&s[1][t], x + 32 + t);
  cc::cp_async_commit();
  cc::cp_async_wait_group<1>();
  y[3 * t] = s[0][t];
  y[3 * t + 1] = s[1][t];
  cc::cp_async_wait_group<0>();
  y[3 * t + 2] = s[1][t];
}

// Zero fill: thread t copies t % 3 * 4 of 8 bytes (0, 4 or 8) and zero-fills the rest.
__global__ void cp_async_zfill8(const float* x, float* y) {
  CUPYCONV_STATIC_SHARED(float, s, [64]);
  const unsigned t = threadIdx.x;
  cc::cp_async_zfill<8>(&s[2 * t], x + 2 * t, static_cast<int>(t % 3) * 4);
  cc::cp_async_wait_all();
  y[2 * t] = s[2 * t];
  y[2 * t + 1] = s[2 * t + 1];
}

// Misuse the emulator rejects: a global destination; a misaligned 16-byte copy.
__global__ void cp_async_to_global(const float* x, float* y) {
  cc::cp_async<4>(y + threadIdx.x, x + threadIdx.x);
  cc::cp_async_wait_all();
}
__global__ void cp_async_misaligned(const float* x, float* y) {
  CUPYCONV_STATIC_SHARED(float, s, [64]);
  cc::cp_async<16>(&s[1], x);
  cc::cp_async_wait_all();
  y[threadIdx.x] = s[threadIdx.x];
}

// --- fused multiply-add --------------------------------------------------------------------

// y[i] = cc::fma(a[i], b[i], c[i]); the planted bug would be a plain a * b + c, which
// rounds twice on the host.
template <typename T>
__global__ void fma_elementwise(const T* a, const T* b, const T* c, T* y, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = cc::fma(a[i], b[i], c[i]);
}
