// Emulator test kernels: warp shuffles, votes and a block reduction.
#include "platform.cuh"

/// atomicAdd(out, sum(x)) with warp shuffles and one shared slot per warp.
__global__ void block_sum(const float* x, float* out, int n) {
  __shared__ float partial[32];
  const unsigned lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
  float v = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    v += x[i];
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const unsigned nwarps = (blockDim.x + warpSize - 1) / warpSize;
  if (warp == 0) {
    v = lane < nwarps ? partial[lane] : 0.0f;
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0) atomicAdd(out, v);
  }
}

/// Counts positive entries with __ballot_sync / __popc.
__global__ void count_positive(const float* x, unsigned int* count, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned ballot = __ballot_sync(0xffffffffu, i < n && x[i] > 0.0f);
  if (threadIdx.x % 32 == 0) atomicAdd(count, (unsigned)__popc(ballot));
}

/// One row of `out` per shuffle flavour, one column per thread (value = 10*tid + 1).
__global__ void shuffle_modes(int* out) {
  const int t = threadIdx.x, lane = t % 32, n = blockDim.x;
  const int v = 10 * t + 1;
  out[0 * n + t] = __shfl_sync(0xffffffffu, v, (lane * 7) % 32);
  out[1 * n + t] = __shfl_up_sync(0xffffffffu, v, 3);
  out[2 * n + t] = __shfl_down_sync(0xffffffffu, v, 5);
  out[3 * n + t] = __shfl_xor_sync(0xffffffffu, v, 6);
  out[4 * n + t] = __shfl_down_sync(0xffffffffu, v, 2, 8);
  out[5 * n + t] = __shfl_up_sync(0xffffffffu, v, 1, 16);
  out[6 * n + t] = __shfl_xor_sync(0xffffffffu, v, 4, 4);
  out[7 * n + t] = __shfl_sync(0xffffffffu, v, lane + 1, 16);
  out[8 * n + t] = (int)__ballot_sync(0xffffffffu, v % 3 == 0);
  out[9 * n + t] = __any_sync(0xffffffffu, lane == 5) + 2 * __all_sync(0xffffffffu, lane < 31);
  const unsigned half_mask = lane < 16 ? 0x0000ffffu : 0xffff0000u;
  out[10 * n + t] = __shfl_down_sync(half_mask, v, 4, 16);
  out[11 * n + t] = (int)__reduce_add_sync(0xffffffffu, (unsigned)lane);
  __syncwarp();
  out[12 * n + t] = (int)__activemask();
  const double d = 0.5 * t;
  out[13 * n + t] = (int)(2.0 * __shfl_xor_sync(0xffffffffu, d, 1));
}
