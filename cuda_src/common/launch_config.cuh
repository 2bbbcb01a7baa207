// cupyconv: the launch configuration shared by every kernel family, in ONE place.
//
// CUPYCONV_BLOCK_THREADS is the number of threads per block of every kernel:
// each kernel declares launch bounds with it (CUPYCONV_LAUNCH_BOUNDS) and
// derives its thread layout from it (cc::kBlockThreads), and the host reads
// the value from this file (cupyconv/_kernels/registry.py parses the #define
// below with a regex at import), so the launchers and the kernels cannot
// disagree.  Keep the define a plain decimal literal on one line.
//
// CUPYCONV_MIN_BLOCKS_PER_SM, the second launch bound, is 1 on purpose.
// Launch bounds steer ptxas' register allocation (NVRTC 12.9, sm_80/sm_90,
// every registered instantiation measured): with the block size alone ptxas
// picks its own caps of 40-80 registers and spills in direct_conv (every
// dtype), col2vol<complex128> and implicit_gemm_fprop<half/int64>; with a
// minimum of 2 or 3 blocks (caps 128 / 80) the implicit GEMM's 128x64 double
// tile (~130-140 registers unbounded) or direct_conv<complex128> spills.  A
// minimum of 1 compiles everything without spills, at more registers than
// without launch bounds (ptxas fills the room it is given).  The exception is
// CUPYCONV_LAUNCH_BOUNDS_MIN(2) on the implicit GEMM's tap-aligned 32-bit-index
// tiles with a 4-byte accumulator, measured to fit 128 registers without spills with
// NVRTC 12.9 and 13.0 (docs/kernels.md, section 3).
//
// Every kernel calls cc::require_block_shape() at entry: a launch whose block
// is not (CUPYCONV_BLOCK_THREADS, 1, 1) traps on the device (__trap(); the
// launch fails instead of silently computing with a wrong thread layout) and
// is an EmulationError under the CPU emulator.
#pragma once
#include "types.cuh"

#if defined(CUPYCONV_BLOCK_THREADS) || defined(CUPYCONV_MIN_BLOCKS_PER_SM)
#error "CUPYCONV_BLOCK_THREADS and CUPYCONV_MIN_BLOCKS_PER_SM are defined only here (the host reads the former from this file)"
#endif
#define CUPYCONV_BLOCK_THREADS 256
#define CUPYCONV_MIN_BLOCKS_PER_SM 1
// Kernel taps per register window of direct_conv (its shared rows are padded by as
// many elements; the host reads this define too: registry.DIRECT_TAP_BLOCK).
#define CUPYCONV_DIRECT_TAP_BLOCK 8
// The multistage implicit GEMM (conv/implicit_gemm_multistage.cu): 4 warps of 64x64 (or
// 32x32) warp tiles, two resident CTAs per SM.
#define CUPYCONV_MULTISTAGE_THREADS 128
/// The launch bounds every kernel declares.
#define CUPYCONV_LAUNCH_BOUNDS __launch_bounds__(CUPYCONV_BLOCK_THREADS, CUPYCONV_MIN_BLOCKS_PER_SM)
/// The same block size with another minimum of resident blocks, for the tiles whose
/// register budget was measured to fit it without spills (the implicit GEMM's
/// tap-aligned tiles: 2, i.e. at most 128 registers at 256 threads).
#define CUPYCONV_LAUNCH_BOUNDS_MIN(min_blocks) __launch_bounds__(CUPYCONV_BLOCK_THREADS, min_blocks)

namespace cc {

/// Threads per block of every kernel family (blockDim = (kBlockThreads, 1, 1)).
constexpr int kBlockThreads = CUPYCONV_BLOCK_THREADS;
/// Kernel taps per register window of direct_conv.
constexpr int kDirectTapBlock = CUPYCONV_DIRECT_TAP_BLOCK;
static_assert(kBlockThreads > 0 && kBlockThreads % 32 == 0 && kBlockThreads <= 1024,
              "CUPYCONV_BLOCK_THREADS must be a multiple of the warp size in [32, 1024]");

/// Stops the launch when a launch-data invariant the host promised does not hold.
CC_DEVICE void require(bool ok, const char* what) {
  if (!ok) {
#if defined(CUPYCONV_DEVICE_EMULATED)
    ::cupyconv_emu::detail::fail_here(what);
#else
    (void)what;
    __trap();
#endif
  }
}

/// Stops the launch unless blockDim == (kBlockThreads, 1, 1).
/// Traps (the emulator: fails naming the launch) unless blockDim is (kThreads, 1, 1).
template <int kThreads>
CC_DEVICE void require_block_threads() {
  if (blockDim.x != static_cast<unsigned>(kThreads) || blockDim.y != 1u || blockDim.z != 1u) {
#if defined(CUPYCONV_DEVICE_EMULATED)
    ::cupyconv_emu::detail::fail_here(
        "kernel launched with blockDim (" + std::to_string(blockDim.x) + "," +
        std::to_string(blockDim.y) + "," + std::to_string(blockDim.z) +
        "); this kernel requires blockDim (" + std::to_string(kThreads) +
        ",1,1) (CUPYCONV_BLOCK_THREADS or CUPYCONV_MULTISTAGE_THREADS, "
        "cuda_src/common/launch_config.cuh)");
#else
    __trap();
#endif
  }
}

/// require_block_threads of CUPYCONV_BLOCK_THREADS, the block of every kernel but the
/// multistage implicit GEMM.
CC_DEVICE void require_block_shape() { require_block_threads<kBlockThreads>(); }

}  // namespace cc
