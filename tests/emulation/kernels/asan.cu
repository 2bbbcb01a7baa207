// Emulator test kernels with planted memory errors for the ASan mode.
#include "platform.cuh"

__global__ void read_past_end(const float* x, float* y, int n) {
  if (threadIdx.x == 0) y[0] = x[n];
}

__global__ void static_shared_overrun(const float* x, float* y) {
  __shared__ float s[32];
  s[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  const float* p = s;  // through a pointer: UBSan's array bounds check stays silent
  y[threadIdx.x] = p[threadIdx.x + 1];  // thread 31 reads s[32]
}

__global__ void dynamic_shared_overrun(float* y, int n) {
  CUPYCONV_DYNAMIC_SHARED(float, s);
  s[threadIdx.x] = 1.0f;
  __syncthreads();
  if (threadIdx.x == 0) y[0] = s[n];  // n == number of floats allocated
}

__global__ void signed_overflow(const int* x, int* y) {
  y[threadIdx.x] = x[threadIdx.x] + 2147483647;
}

__global__ void copy_through_shared(const float* x, float* y, int n) {
  __shared__ float s[64];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  const float zero = __shfl_xor_sync(0xffffffffu, 0.0f, 1);  // all lanes take part
  if (i < n) y[i] = s[threadIdx.x] + zero;
}
