// Test kernels of the warp-level MMA atoms and ldmatrix (common/mma_atoms.cuh),
// for the emulator (tests/emulation/test_emu_mma.py) and NVRTC
// (tests/toolchain/test_mma_nvrtc.py).  Matrices are row-major in global memory;
// every warp of the grid multiplies its own batch entry (batch = global warp
// index).  Fragments are loaded and stored only through the atoms' own
// (lane, i) -> (row, col) maps.  Tests locate lines by the MARK comments.
#include "platform.cuh"
#include "common/mma_atoms.cuh"
#include "atom_io.cuh"

__device__ __forceinline__ int global_warp() {
  return static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 32);
}

/// D = A(8x4) * B(4x8) + C(8x8) in double.  bug != 0 plants a fragment mix-up:
/// the lane's A register and B register are swapped (A has only one).
__global__ void mma_f64(const double* A, const double* B, const double* C, double* D, int bug) {
  atom_io::product<cc::MmaF64_m8n8k4>(A, B, C, D, global_warp(), bug);
}

/// D = A(16x8) * B(8x8) + C(16x8), tf32 operands (cc::to_tf32), float accumulation.
/// mode bit 0 plants a bug (A registers 0 and 1 swapped); bit 1 passes the raw
/// float bits without cvt.rna.tf32 (to see what the tensor core does with the
/// low 13 bits).
__global__ void mma_tf32(const float* A, const float* B, const float* C, float* D, int mode) {
  using Mma = cc::MmaTf32_m16n8k8;
  const int lane = threadIdx.x % 32, w = global_warp();
  const bool raw = (mode & 2) != 0;
  A += w * Mma::kM * Mma::kK;
  B += w * Mma::kK * Mma::kN;
  C += w * Mma::kM * Mma::kN;
  D += w * Mma::kM * Mma::kN;
  Mma::FragA a;
  Mma::FragB b;
  Mma::FragC c;
  for (int i = 0; i < Mma::kAElems; ++i) {
    const cc::MmaCoord p = Mma::a_coord(lane, i);
    const float v = A[p.row * Mma::kK + p.col];
    a[i] = raw ? __float_as_uint(v) : cc::to_tf32(v);
  }
  for (int i = 0; i < Mma::kBElems; ++i) {
    const cc::MmaCoord p = Mma::b_coord(lane, i);
    const float v = B[p.row * Mma::kN + p.col];
    b[i] = raw ? __float_as_uint(v) : cc::to_tf32(v);
  }
  for (int i = 0; i < Mma::kCElems; ++i) {
    const cc::MmaCoord p = Mma::c_coord(lane, i);
    c[i] = C[p.row * Mma::kN + p.col];
  }
  if (mode & 1) {
    const unsigned t = a[0];
    a[0] = a[1];
    a[1] = t;
  }
  Mma::mma(c, a, b, c);  // MARK_MMA_TF32 (accumulates in place)
  for (int i = 0; i < Mma::kCElems; ++i) {
    const cc::MmaCoord p = Mma::c_coord(lane, i);
    D[p.row * Mma::kN + p.col] = c[i];
  }
}

/// D = A(16x16) * B(16x8) + C(16x8), f16 operands, float accumulation.  bug != 0
/// swaps A registers 0 and 1 (each an f16x2).
__global__ void mma_f16(const cc::half* A, const cc::half* B, const float* C, float* D, int bug) {
  atom_io::product<cc::MmaF16_m16n8k16>(A, B, C, D, global_warp(), bug);
}

/// The f16 product with both operands staged in shared memory (rows padded) and
/// loaded with ldmatrix: A (16x16 row-major) by .x4, B (16x8 row-major, k x n)
/// by .x2.trans.  One warp per block.
__global__ void mma_f16_ldmatrix(const cc::half* A, const cc::half* B, const float* C, float* D) {
  using Mma = cc::MmaF16_m16n8k16;
  using L = cc::LdmatrixM8n8;
  CUPYCONV_STATIC_SHARED(cc::half, sA, [16][24]);  // 48-byte rows: 16-byte aligned, padded
  CUPYCONV_STATIC_SHARED(cc::half, sB, [16][16]);
  const int lane = threadIdx.x % 32, w = blockIdx.x;
  A += w * Mma::kM * Mma::kK;
  B += w * Mma::kK * Mma::kN;
  C += w * Mma::kM * Mma::kN;
  D += w * Mma::kM * Mma::kN;
  for (int e = lane; e < 16 * 16; e += 32) sA[e / 16][e % 16] = A[e];
  for (int e = lane; e < 16 * 8; e += 32) sB[e / 8][e % 8] = B[e];
  __syncwarp();
  Mma::FragA a;
  Mma::FragB b;
  Mma::FragC c;
  {
    const int m = L::src_matrix(lane, 4), r = L::src_row(lane);
    cc::ldmatrix<4, false>(a, &sA[r + 8 * (m & 1)][8 * (m >> 1)]);  // MARK_LDSM_A
  }
  {
    const int m = L::src_matrix(lane, 2), r = L::src_row(lane);
    cc::ldmatrix<2, true>(b, &sB[8 * m + r][0]);
  }
  for (int i = 0; i < Mma::kCElems; ++i) {
    const cc::MmaCoord p = Mma::c_coord(lane, i);
    c[i] = C[p.row * Mma::kN + p.col];
  }
  Mma::mma(c, a, b, c);
  for (int i = 0; i < Mma::kCElems; ++i) {
    const cc::MmaCoord p = Mma::c_coord(lane, i);
    D[p.row * Mma::kN + p.col] = c[i];
  }
}

/// out[lane * Num + m] = register m of ldmatrix.x{Num}{.trans} of the Num 8x8
/// matrices src[m][row][col] (16-bit), staged in shared memory with padded rows
/// and the matrices in reverse order.  One warp per block.
template <int Num, bool Trans>
__global__ void ldmatrix_dump(const unsigned short* src, unsigned* out) {
  using L = cc::LdmatrixM8n8;
  CUPYCONV_STATIC_SHARED(unsigned short, s, [4][8][16]);
  const int lane = threadIdx.x % 32;
  for (int e = lane; e < Num * 64; e += 32) s[Num - 1 - e / 64][(e / 8) % 8][e % 8] = src[e];
  __syncwarp();
  unsigned r[Num];
  const int m = L::src_matrix(lane, Num);
  cc::ldmatrix<Num, Trans>(r, &s[Num - 1 - m][L::src_row(lane)][0]);
  for (int j = 0; j < Num; ++j) out[lane * Num + j] = r[j];
}

/// y[i] = cc::to_tf32(x[i]) (the bits).
__global__ void to_tf32_bits(const float* x, unsigned* y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] = cc::to_tf32(x[i]);
}

/// Every fragment map, per lane: out[lane][136] = (row, col) pairs of
/// f64 A0 B0 C0 C1 | tf32 A0..3 B0..1 C0..3 | f16 A0..7 B0..3 C0..3 |
/// ldmatrix dst (j, trans) for j = 0, 1 and trans = 0, 1 (4 pairs), then
/// src_matrix(lane, 1), src_matrix(lane, 2), src_matrix(lane, 4), src_row(lane), then
/// (from 72) bf16 A0..7 B0..3 C0..3 | f64 m16n8k16 A0..7 B0..3 C0..3.
/// Writes (row, col) at o; returns the next slot.
__device__ __forceinline__ int* put(int* o, cc::MmaCoord p) {
  o[0] = p.row;
  o[1] = p.col;
  return o + 2;
}

/// Writes an atom's A, B and C maps for `lane` at o; returns the next slot.
template <typename Atom>
__device__ __forceinline__ int* put_maps(int* o, int lane) {
  for (int i = 0; i < Atom::kAElems; ++i) o = put(o, Atom::a_coord(lane, i));
  for (int i = 0; i < Atom::kBElems; ++i) o = put(o, Atom::b_coord(lane, i));
  for (int i = 0; i < Atom::kCElems; ++i) o = put(o, Atom::c_coord(lane, i));
  return o;
}

__global__ void fragment_maps(int* out) {
  const int lane = threadIdx.x % 32;
  int* o = put_maps<cc::MmaF16_m16n8k16>(put_maps<cc::MmaTf32_m16n8k8>(
      put_maps<cc::MmaF64_m8n8k4>(out + lane * 136, lane), lane), lane);
  for (int t = 0; t < 2; ++t)
    for (int j = 0; j < 2; ++j) o = put(o, cc::LdmatrixM8n8::dst(lane, j, t != 0));
  *o++ = cc::LdmatrixM8n8::src_matrix(lane, 1);
  *o++ = cc::LdmatrixM8n8::src_matrix(lane, 2);
  *o++ = cc::LdmatrixM8n8::src_matrix(lane, 4);
  *o++ = cc::LdmatrixM8n8::src_row(lane);
  put_maps<cc::MmaF64_m16n8k16>(put_maps<cc::MmaBf16_m16n8k16>(o, lane), lane);
}

// --- planted synchronisation bugs (emulator only; undefined behaviour on a GPU) ---

/// Lane 31 exits before the mma: the warp is not complete.
__global__ void mma_lane_exits(double* D) {
  using Mma = cc::MmaF64_m8n8k4;
  const int lane = threadIdx.x % 32;
  if (lane == 31) return;
  Mma::FragA a = {1.0};
  Mma::FragB b = {1.0};
  Mma::FragC c = {0.0, 0.0};
  Mma::mma(c, a, b, c);  // MARK_EXIT
  D[threadIdx.x] = c[0];
}

/// The two half-warps reach different mma calls.
__global__ void mma_divergent(double* D) {
  using Mma = cc::MmaF64_m8n8k4;
  const int lane = threadIdx.x % 32;
  Mma::FragA a = {1.0};
  Mma::FragB b = {1.0};
  Mma::FragC c = {0.0, 0.0};
  if (lane < 16) {
    Mma::mma(c, a, b, c);  // MARK_DIV_LOW
  } else {
    Mma::mma(c, a, b, c);  // MARK_DIV_HIGH
  }
  D[threadIdx.x] = c[0];
}

/// Half the warp executes the mma, the other half a __syncwarp().
__global__ void mma_meets_syncwarp(double* D) {
  using Mma = cc::MmaF64_m8n8k4;
  const int lane = threadIdx.x % 32;
  Mma::FragA a = {1.0};
  Mma::FragB b = {1.0};
  Mma::FragC c = {0.0, 0.0};
  if (lane < 16) {
    Mma::mma(c, a, b, c);  // MARK_SYNCWARP_MMA
  } else {
    __syncwarp();
  }
  D[threadIdx.x] = c[0];
}

/// ldmatrix with row addresses in global memory.
__global__ void ldmatrix_from_global(const unsigned short* src, unsigned* out) {
  const int lane = threadIdx.x % 32;
  unsigned r[1];
  cc::ldmatrix<1, false>(r, src + 8 * (lane % 8));  // MARK_LDSM_GLOBAL
  out[lane] = r[0];
}

/// ldmatrix with a row address 2 bytes past a 16-byte boundary.
__global__ void ldmatrix_misaligned(const unsigned short* src, unsigned* out) {
  CUPYCONV_STATIC_SHARED(unsigned short, s, [8][16]);
  const int lane = threadIdx.x % 32;
  for (int e = lane; e < 8 * 16; e += 32) s[e / 16][e % 16] = src[e % 64];
  __syncwarp();
  unsigned r[1];
  cc::ldmatrix<1, false>(r, &s[lane % 8][1]);  // MARK_LDSM_MISALIGNED
  out[lane] = r[0];
}
