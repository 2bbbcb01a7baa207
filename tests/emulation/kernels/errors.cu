// Emulator test kernels with planted synchronisation bugs.  Tests locate the
// lines by the MARK comments.
#include "platform.cuh"

__global__ void divergent_barrier(int* y) {
  if (threadIdx.x % 2 == 0) {
    __syncthreads();  // MARK_EVEN
  } else {
    __syncthreads();  // MARK_ODD
  }
  y[threadIdx.x] = 1;
}

__global__ void early_exit(int* y) {
  if (threadIdx.x >= 5) return;
  __syncthreads();  // MARK_EARLY
  y[threadIdx.x] = 1;
}

__global__ void mask_without_self(int* y) {
  y[threadIdx.x] = __shfl_sync(0x1u, (int)threadIdx.x, 0);  // MARK_MASK
}

__global__ void shuffle_after_exit(int* y) {
  if (threadIdx.x >= 16) return;
  y[threadIdx.x] = __shfl_down_sync(0xffffffffu, (int)threadIdx.x, 1);  // MARK_EXITED
}

/// y[i] = x[neighbour]; without the barrier the read races with the write.
template <bool kBarrier>
__global__ void neighbour(const float* x, float* y) {
  CUPYCONV_DYNAMIC_SHARED(float, s);
  const int t = threadIdx.x, base = blockIdx.x * blockDim.x;
  s[t] = x[base + t];
  if (kBarrier) __syncthreads();
  y[base + t] = s[(t + 1) % blockDim.x];
}
