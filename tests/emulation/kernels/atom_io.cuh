// Shared by the atom test kernels (mma.cu, mma_k16.cu): one warp's product of an MMA atom on
// row-major matrices in global memory, fragments loaded and stored only through the atom's
// (lane, i) -> (row, col) maps.  Include after platform.cuh and common/mma_atoms.cuh.
#pragma once

namespace atom_io {

/// Element i of a fragment: a plain register, or a 16-bit half of a packed one.
template <int N> __device__ __forceinline__ void set(double (&f)[N], int i, double v) { f[i] = v; }
template <int N> __device__ __forceinline__ void set(float (&f)[N], int i, float v) { f[i] = v; }
template <int N> __device__ __forceinline__ void set(unsigned (&f)[N], int i, cc::half v) {
  cc::frag_set_half(f, i, v);
}
template <int N> __device__ __forceinline__ void set(unsigned (&f)[N], int i, cc::bfloat16 v) {
  cc::frag_set_bf16(f, i, v);
}

/// The register a planted bug swaps with a[0]: a[1], or b[0] when A has one register.
template <typename R, int NA, int NB>
__device__ __forceinline__ R& select_second(R (&a)[NA], R (&b)[NB]) {
  if constexpr (NA > 1) {
    return a[1];
  } else {
    return b[0];
  }
}

/// D = A(kM x kK) * B(kK x kN) + C(kM x kN) for the warp's batch entry `w`; bug != 0
/// plants a fragment mix-up (A registers 0 and 1 swapped; A and B where A has one).  An emulator error at the atom
/// names this header's line as its call site.
template <typename Mma, typename T, typename TC>
__device__ __forceinline__ void product(const T* A, const T* B, const TC* C, TC* D, int w,
                                        int bug) {
  const int lane = threadIdx.x % 32;
  A += w * Mma::kM * Mma::kK;
  B += w * Mma::kK * Mma::kN;
  C += w * Mma::kM * Mma::kN;
  D += w * Mma::kM * Mma::kN;
  typename Mma::FragA a;
  typename Mma::FragB b;
  typename Mma::FragC c;
  for (int i = 0; i < Mma::kAElems; ++i) {
    const cc::MmaCoord p = Mma::a_coord(lane, i);
    set(a, i, A[p.row * Mma::kK + p.col]);
  }
  for (int i = 0; i < Mma::kBElems; ++i) {
    const cc::MmaCoord p = Mma::b_coord(lane, i);
    set(b, i, B[p.row * Mma::kN + p.col]);
  }
  for (int i = 0; i < Mma::kCElems; ++i) {
    const cc::MmaCoord p = Mma::c_coord(lane, i);
    c[i] = C[p.row * Mma::kN + p.col];
  }
  if (bug) {  // an A register swapped with its neighbour (with B's, where A has only one)
    auto& other = select_second(a, b);
    const auto t = a[0];
    a[0] = other;
    other = t;
  }
  Mma::mma(c, a, b, c);  // MARK_ATOM_IO_MMA
  for (int i = 0; i < Mma::kCElems; ++i) {
    const cc::MmaCoord p = Mma::c_coord(lane, i);
    D[p.row * Mma::kN + p.col] = c[i];
  }
}

}  // namespace atom_io
