// Test kernels of the issue-26 pieces: the bf16 and f64 m16n8k16 atoms
// (common/mma_atoms.cuh), ldmatrix of 32-bit (TF32) data, the XOR swizzle
// (common/swizzle.cuh) and a multistage cp.async -> swizzled shared memory ->
// ldmatrix -> mma pipeline in dynamic shared memory past 48 KiB.  For the emulator
// (tests/emulation/test_emu_mma_k16.py, test_emu_swizzle.py) and NVRTC
// (tests/toolchain/test_mma_nvrtc.py).  Matrices are row-major in global memory; in
// the atom kernels every warp multiplies its own batch entry (batch = global warp).
// mma_f64_k16 exists where cc::kHasMmaF64K16 (sm_90+ under NVRTC); the rest needs sm_80.
#include "platform.cuh"
#include "common/cp_async.cuh"
#include "common/mma_atoms.cuh"
#include "common/swizzle.cuh"
#include "atom_io.cuh"

__device__ __forceinline__ int k16_global_warp() {
  return static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 32);
}

/// D = A(16x16) * B(16x8) + C(16x8), bf16 operands, float accumulation.  bug != 0
/// swaps A registers 0 and 1 (each a bf16x2).
__global__ void mma_bf16(const cc::bfloat16* A, const cc::bfloat16* B, const float* C, float* D,
                         int bug) {
  atom_io::product<cc::MmaBf16_m16n8k16>(A, B, C, D, k16_global_warp(), bug);
}

#if defined(CUPYCONV_HAS_MMA_F64_K16)  // the emulator, and sm_90+ under NVRTC
/// D = A(16x16) * B(16x8) + C(16x8) in double with the sm_90 atom.  bug != 0 swaps A
/// registers 0 and 1 (rows g and g + 8 of column t).
__global__ void mma_f64_k16(const double* A, const double* B, const double* C, double* D,
                            int bug) {
  atom_io::product<cc::MmaF64_m16n8k16>(A, B, C, D, k16_global_warp(), bug);
}
#endif

/// y[i] = bits of cc::float_to_bfloat16(x[i]); z[i] = cc::bfloat16_to_float of those bits.
__global__ void bf16_round_trip(const float* x, unsigned short* y, float* z, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const cc::bfloat16 h = cc::float_to_bfloat16(x[i]);
    y[i] = h.bits;
    z[i] = cc::bfloat16_to_float(h);
  }
}

/// out[i] = Swz::apply(i) for i < n (the device side of cupyconv/_kernels/smem_layout.py).
template <int B, int M, int S>
__global__ void swizzle_map(int* out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = cc::Swizzle<B, M, S>::apply(i);
}

/// The operand type and atom of the pipeline for a storage element.
template <typename T> struct PipeAtom;
template <> struct PipeAtom<float> { using type = cc::MmaTf32_m16n8k8; };
template <> struct PipeAtom<cc::half> { using type = cc::MmaF16_m16n8k16; };
template <> struct PipeAtom<cc::bfloat16> { using type = cc::MmaBf16_m16n8k16; };

/// D(64x8) = A(64 x K) * B(K x 8) by one CTA of 4 warps (warp w: rows 16w ..), the way
/// the issue-26 tiles run it: K-tiles of 128 bytes per row in `Stages` stages of dynamic
/// shared memory `stage_bytes` apart (A: 64 rows, then B stored [n][k]: 8 rows), each row
/// XOR-swizzled with cc::Swizzle128B (16-byte units: unit u of row r at u ^ (r % 8)),
/// filled by 16-byte cp.async, one wait + barrier per K-tile, fragments by ldmatrix
/// (32-bit elements for TF32: A .x4, B .x2).  T = float (operands already TF32 values),
/// cc::half or cc::bfloat16; K a multiple of 128 bytes.  `mode` plants one bug:
/// 1 reads without the swizzle, 2 skips the wait, 4 swaps A fragment registers 0 and 1.
template <typename T, int Stages>
__global__ void swizzled_pipeline(const T* A, const T* B, float* D, int K, int stage_bytes,
                                  int mode) {
  using Mma = typename PipeAtom<T>::type;
  using Swz = typename cc::Swizzle128B<static_cast<int>(sizeof(T))>::type;
  using L = cc::LdmatrixM8n8;
  constexpr int kUnit = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte unit
  constexpr int kRow = 128 / static_cast<int>(sizeof(T));  // elements per K-tile row
  constexpr int kRowsA = 64, kRowsB = 8;
  CUPYCONV_DYNAMIC_SHARED(unsigned char, smem);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int tiles = K / kRow;
  auto stage_a = [&](int s) { return reinterpret_cast<T*>(smem + s * stage_bytes); };
  auto stage_b = [&](int s) { return stage_a(s) + kRowsA * kRow; };
  auto load_tile = [&](int kt) {
    const int s = kt % Stages;
    for (int u = tid; u < (kRowsA + kRowsB) * 8; u += blockDim.x) {  // 16-byte units
      const int row = u / 8, col = (u % 8) * kUnit;
      if (row < kRowsA) {
        cc::cp_async<16>(Swz::at(stage_a(s), row * kRow + col), A + row * K + kt * kRow + col);
      } else {
        const int n = row - kRowsA;
        cc::cp_async<16>(Swz::at(stage_b(s), n * kRow + col), B + n * K + kt * kRow + col);
      }
    }
  };
  auto read_at = [&](const T* base, int row, int unit) {  // the row address ldmatrix gets
    const int offset = row * kRow + unit * kUnit;
    return (mode & 1) ? base + offset : Swz::at(base, offset);
  };
  typename Mma::FragC acc = {0.f, 0.f, 0.f, 0.f};
  for (int kt = 0; kt < Stages - 1; ++kt) {
    if (kt < tiles) load_tile(kt);
    cc::cp_async_commit();
  }
  for (int kt = 0; kt < tiles; ++kt) {
    if (!(mode & 2)) cc::cp_async_wait_group<Stages - 2>();  // MARK_PIPE_WAIT
    __syncthreads();
    const int s = kt % Stages;
    for (int kk = 0; kk < 4; ++kk) {  // 4 atom k-steps of 32 bytes per 128-byte K-tile
      typename Mma::FragA a;
      typename Mma::FragB b;
      {
        const int m = L::src_matrix(lane, 4);
        cc::ldmatrix<4, false>(a, read_at(stage_a(s), 16 * warp + 8 * (m & 1) + L::src_row(lane),
                                          2 * kk + (m >> 1)));
      }
      {
        const int m = L::src_matrix(lane, 2);
        cc::ldmatrix<2, false>(b, read_at(stage_b(s), L::src_row(lane), 2 * kk + m));
      }
      if (mode & 4) {
        const unsigned t = a[0];
        a[0] = a[1];
        a[1] = t;
      }
      Mma::mma(acc, a, b, acc);
    }
    if (kt + Stages - 1 < tiles) load_tile(kt + Stages - 1);
    cc::cp_async_commit();
  }
  cc::cp_async_wait_all();
  for (int i = 0; i < Mma::kCElems; ++i) {
    const cc::MmaCoord p = Mma::c_coord(lane, i);
    D[(16 * warp + p.row) * 8 + p.col] = acc[i];
  }
}

/// out[lane] = the register ldmatrix.x1.trans gives lane `lane` of an 8x4 float matrix
/// src (8 rows of 16 bytes): .trans works on 16-bit halves, so this is NOT the float
/// transpose (the test checks both facts).
__global__ void ldmatrix32_trans(const float* src, unsigned* out) {
  CUPYCONV_STATIC_SHARED(float, s, [8][4]);
  const int lane = threadIdx.x % 32;
  s[lane / 4][lane % 4] = src[lane];
  __syncwarp();
  unsigned r[1];
  cc::ldmatrix<1, true>(r, &s[cc::LdmatrixM8n8::src_row(lane)][0]);
  out[lane] = r[0];
}
