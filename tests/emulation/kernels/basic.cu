// Emulator test kernels: shared-memory tiling, dynamic shared memory, struct
// parameters, strided views, atomics and half conversion.
#include "platform.cuh"

/// C = A @ B for row-major float matrices, TILE x TILE thread blocks.
template <int TILE>
__global__ void __launch_bounds__(TILE * TILE)
sgemm_tiled(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
            int m, int n, int k) {
  __shared__ float as[TILE][TILE];
  __shared__ float bs[TILE][TILE];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * TILE + ty;
  const int col = blockIdx.x * TILE + tx;
  float acc = 0.0f;
  for (int t = 0; t < k; t += TILE) {
    as[ty][tx] = (row < m && t + tx < k) ? a[row * k + t + tx] : 0.0f;
    bs[ty][tx] = (t + ty < k && col < n) ? __ldg(&b[(t + ty) * n + col]) : 0.0f;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < TILE; ++i) acc = fmaf(as[ty][i], bs[i][tx], acc);
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = acc;
}

/// Reverses each block-sized chunk of x through dynamic shared memory.
template <class T>
__global__ void reverse_chunks(const T* x, T* y, int n) {
  CUPYCONV_DYNAMIC_SHARED(T, buf);
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  buf[threadIdx.x] = i < n ? x[i] : T(0);
  __syncthreads();
  const int j = blockIdx.x * blockDim.x + (blockDim.x - 1 - threadIdx.x);
  if (j < n) y[j] = buf[threadIdx.x];
}

/// Parameter struct passed by value (numpy dtype with align=True).
struct AffineParams {
  long long n;    // number of elements
  double scale;   // multiplier
  int offset;     // added after scaling
};

/// y[i] = x[i * stride] * p.scale + p.offset, grid-stride loop.
__global__ void affine_strided(const float* x, long long stride, double* y, AffineParams p) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.n;
       i += (long long)gridDim.x * blockDim.x) {
    y[i] = x[i * stride] * p.scale + p.offset;
  }
}

/// Histogram of non-negative ints with a shared-memory privatised copy.
__global__ void histogram(const int* x, int n, unsigned int* hist, int nbins, float* fsum,
                          double* dsum, int* imax, unsigned long long* count) {
  CUPYCONV_DYNAMIC_SHARED(unsigned int, local);
  for (int b = threadIdx.x; b < nbins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    atomicAdd(&local[x[i] % nbins], 1u);
    atomicAdd(fsum, (float)x[i]);
    atomicAdd(dsum, (double)x[i]);
    atomicMax(imax, x[i]);
    atomicAdd(count, 1ull);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < nbins; b += blockDim.x) atomicAdd(&hist[b], local[b]);
}

/// Round-trips floats through __half, also writing the raw bits.
__global__ void half_roundtrip(const float* x, unsigned short* bits, float* back, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    __half h = __float2half_rn(x[i]);
    bits[i] = __half_as_ushort(h);
    back[i] = __half2float(__ushort_as_half(bits[i]));
  }
}

/// Block-wide votes and a few integer intrinsics.
__global__ void block_votes(const int* x, int* out) {
  const int v = x[threadIdx.x];
  const int cnt = __syncthreads_count(v > 0);
  const int all = __syncthreads_and(v > 0);
  const int any = __syncthreads_or(v > 100);
  if (threadIdx.x == 0) {
    out[0] = cnt;
    out[1] = all;
    out[2] = any;
    out[3] = (int)__umulhi(0xF0000000u, 0x10u);
    out[4] = (int)(__umul64hi(0xFFFFFFFFFFFFFFFFull, 3ull));
    out[5] = __float2int_rz(-2.7f) + 10 * __float2int_rn(2.5f);
    out[6] = min(3, -4) + max(2u, 7u);
    out[7] = __popc(0xF0F0u) + __clz(1);
  }
}
