// Device microbenchmarks of scripts/device_check.sh (benchmarks/device_micro.py): the
// mma.sync issue rate of every tensor-core atom of common/mma_atoms.cuh, and copy bandwidth
// (L2-resident and HBM).  Not a conv kernel: compiled on demand through the project's
// loader (cupyconv._compile.load_module) or the emulator, never packaged.
//
//   mma_issue_rate<Atom, kChains>(cycles, sink, iters): every warp runs `iters` rounds of
//     kChains independent MMAs (kChains accumulators, so the tensor pipe never waits on a
//     result) between two clock64() reads; lane 0 writes the warp's cycles, every lane a sum
//     of its accumulators (so nothing is dead code).  Operands are small normal numbers
//     (no overflow, no subnormals, whatever `iters`).
//   copy_bandwidth(src, dst, n, repeats): `repeats` grid-stride passes of dst[i] = src[i]
//     over n 16-byte elements with ld.global.cg / st.global.cg (L2, not L1): a working set
//     that fits L2 measures L2 bandwidth, a large one HBM.
//
// MmaF64_m16n8k16 is sm_90 only (name it only there); the others need sm_80.
#include "platform.cuh"
#include "common/mma_atoms.cuh"

/// The operand registers of an atom's microbenchmark: A = 1, B = 2^-30 (2^-14 for f16).
template <typename Atom> struct MicroOperands;
template <> struct MicroOperands<cc::MmaF64_m8n8k4> {
  static CC_DEVICE double a() { return 1.0; }
  static CC_DEVICE double b() { return 9.313225746154785e-10; }
};
template <> struct MicroOperands<cc::MmaF64_m16n8k16> : MicroOperands<cc::MmaF64_m8n8k4> {};
template <> struct MicroOperands<cc::MmaTf32_m16n8k8> {
  static CC_DEVICE unsigned a() { return 0x3f800000u; }   // 1.0f
  static CC_DEVICE unsigned b() { return 0x30800000u; }   // 2^-30
};
template <> struct MicroOperands<cc::MmaF16_m16n8k16> {
  static CC_DEVICE unsigned a() { return 0x3c003c00u; }   // (1, 1) halves
  static CC_DEVICE unsigned b() { return 0x04000400u; }   // (2^-14, 2^-14)
};
template <> struct MicroOperands<cc::MmaBf16_m16n8k16> {
  static CC_DEVICE unsigned a() { return 0x3f803f80u; }   // (1, 1) bfloat16
  static CC_DEVICE unsigned b() { return 0x30803080u; }   // (2^-30, 2^-30)
};

template <typename Atom, int kChains>
__global__ void mma_issue_rate(long long* cycles, double* sink, int iters) {
  using Ops = MicroOperands<Atom>;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const long long thread = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  typename Atom::FragA a;
  typename Atom::FragB b;
  typename Atom::FragC acc[kChains];
  for (int i = 0; i < Atom::kARegs; ++i) a[i] = Ops::a();
  for (int i = 0; i < Atom::kBRegs; ++i) b[i] = Ops::b();
  for (int c = 0; c < kChains; ++c)
    for (int e = 0; e < Atom::kCRegs; ++e) acc[c][e] = 0;
  __syncwarp();
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) Atom::mma(acc[c], a, b, acc[c]);
  }
  const long long t1 = clock64();
  double s = 0;
  for (int c = 0; c < kChains; ++c)
    for (int e = 0; e < Atom::kCRegs; ++e) s += static_cast<double>(acc[c][e]);
  sink[thread] = s;
  if (lane == 0) cycles[thread / 32] = t1 - t0;
}

__global__ void copy_bandwidth(const float4* src, float4* dst, long long n, int repeats) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (int r = 0; r < repeats; ++r) {
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride)
      __stcg(dst + i, __ldcg(src + i));
  }
}
