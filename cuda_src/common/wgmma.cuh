// cupyconv: Hopper warpgroup MMA (wgmma), its fences and mbarriers -- one API on both sides.
//
// Include "platform.cuh" first, then "common/wgmma.cuh".  A kernel compiled for sm_90a
// (an arch-specific family, docs/kernels.md) gets the PTX instructions; the CPU emulator
// (cuda_src/emu/emu_wgmma.cuh, docs/emulation.md "Warpgroup MMA") runs the same calls
// exactly, with the asynchrony checked.  Elsewhere (sm_80, sm_90) calling them is a
// compile-time error: ptxas accepts wgmma only for sm_90a.
//
//   unsigned long long da = cc::wgmma_desc(smem_a, lbo, sbo, cc::kWgmmaSwizzle128B);
//   cc::wgmma_fence();                                    // wgmma.fence.sync.aligned
//   cc::wgmma<cc::kWgmmaF16, N>(acc, da, db, scale_d);    // wgmma.mma_async ... f32.f16.f16
//   cc::wgmma_commit_group();                             // wgmma.commit_group.sync.aligned
//   cc::wgmma_wait_group<0>();                            // wgmma.wait_group.sync.aligned 0
//
// Instructions (all 128 threads of an aligned warpgroup, warps 4k .. 4k + 3, converged;
// D is a 64 x N float32 tile, N a multiple of 8 in [8, 256], spelled here for N = 8, 16,
// 32, 64, 128, 256; acc holds N / 2 floats per thread):
//   wgmma<Type, N, TransA, TransB>(acc, desc_a, desc_b, scale_d)  A and B in shared memory
//   wgmma_rs<Type, N, TransB>(acc, a, desc_b, scale_d)            A in registers (a: 4 x b32
//       per thread, the fragment of cc::WgmmaFragment::a16 / a_tf32)
// Type cc::kWgmmaF16 / kWgmmaBF16 (m64nNk16) or kWgmmaTF32 (m64nNk8, no transpose).
// scale_d = 0 computes D = A * B (the accumulators are not read), else D = A * B + D.
// TransA / TransB = 0: the matrix is K-major in shared memory (A M x K with K contiguous,
// B N x K with K contiguous); 1: M-major / N-major (f16 and bf16 only).
//
// Descriptors: cc::wgmma_desc(start, lbo_bytes, sbo_bytes, swizzle, base_offset) encodes
// the PTX ISA's matrix descriptor (start address, leading and stride dimension byte
// offsets, all >> 4 in 14 bits; base offset in bits 49-51; swizzle in 62-63); the canonical
// layouts they describe are spelled out at the top of cuda_src/emu/emu_wgmma.cuh.
// cc::wgmma_desc_advance(desc, bytes) moves its start address (a K step inside a
// swizzled tile).  A swizzled tile starts on its pattern boundary (1024, 512, 256 bytes
// for 128, 64, 32 B) unless the base offset says which row of the pattern it starts in.
//
// Order rules, which the emulator checks: cc::wgmma_fence() before the first wgmma of each
// batch (after the previous wait); the accumulators (and an RS A fragment) are not read or
// written between the wgmma and the wait_group that completes it; shared-memory operands
// written by ordinary stores or cp.async are made visible to the async proxy with
// cc::fence_proxy_async() (then a barrier) before the wgmma, and are not overwritten
// before that wait.
//
// mbarriers (a uint64 in shared memory, 8-byte aligned): mbarrier_init(bar, count),
// mbarrier_arrive(bar) (returns the phase token), mbarrier_arrive_expect_tx(bar, bytes),
// mbarrier_expect_tx(bar, bytes), mbarrier_complete_tx(bar, bytes),
// mbarrier_try_wait_parity(bar, parity) (true once the phase of that parity completed)
// and mbarrier_wait_parity(bar, parity) (polls it).
//
// Header-only, no standard library (NVRTC has none).
#pragma once
#include "mma_atoms.cuh"

#if defined(CUPYCONV_DEVICE_EMULATED) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CUPYCONV_HAS_WGMMA 1
#endif

namespace cc {

#if defined(CUPYCONV_HAS_WGMMA)
constexpr bool kHasWgmma = true;     ///< the wgmma instructions can be used here (sm_90a)
#else
constexpr bool kHasWgmma = false;
#endif

/// Swizzle modes of a matrix descriptor (its bits 62-63).
constexpr int kWgmmaSwizzleNone = 0;
constexpr int kWgmmaSwizzle128B = 1;
constexpr int kWgmmaSwizzle64B = 2;
constexpr int kWgmmaSwizzle32B = 3;

/// Element types of A and B (f32 accumulation always).
constexpr int kWgmmaF16 = 1;    ///< m64nNk16 .f32.f16.f16
constexpr int kWgmmaBF16 = 2;   ///< m64nNk16 .f32.bf16.bf16
constexpr int kWgmmaTF32 = 3;   ///< m64nNk8 .f32.tf32.tf32

template <int N>
struct WgmmaShape {
  static_assert(N >= 8 && N <= 256 && N % 8 == 0, "wgmma N must be a multiple of 8 in [8, 256]");
  static constexpr int kRegs = N / 2;   ///< accumulator floats per thread
};

/// Register fragments of a warpgroup thread x (0..127): (row, column) of D (64 x N), of the
/// RS A operand (64 x 16 halves, 64 x 8 tf32), PTX ISA "Register Fragments" of wgmma.
struct WgmmaFragment {
  /// D register i (< N / 2).
  static CC_DEVICE constexpr MmaCoord d(int x, int i) {
    return MmaCoord{16 * (x / 32) + (x % 32) / 4 + 8 * ((i >> 1) & 1), 8 * (i / 4) + 2 * (x % 4) + (i & 1)};
  }
  /// f16 / bf16 A half i (< 8): register i / 2, low 16 bits for even i.
  static CC_DEVICE constexpr MmaCoord a16(int x, int i) {
    return MmaCoord{16 * (x / 32) + (x % 32) / 4 + 8 * ((i >> 1) & 1), 2 * (x % 4) + (i & 1) + 8 * (i >> 2)};
  }
  /// tf32 A register i (< 4).
  static CC_DEVICE constexpr MmaCoord a_tf32(int x, int i) {
    return MmaCoord{16 * (x / 32) + (x % 32) / 4 + 8 * (i & 1), x % 4 + 4 * (i >> 1)};
  }
};

/// Shared state-space address of a pointer to shared memory.
CC_DEVICE unsigned smem_address(const void* p) {
#if defined(CUPYCONV_DEVICE_EMULATED)
  return ::cupyconv_emu::detail::shared_address(p, "cc::smem_address");
#else
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
#endif
}

/// The matrix descriptor of a tile starting at `start` (shared memory).
CC_DEVICE unsigned long long wgmma_desc(const void* start, unsigned lbo_bytes, unsigned sbo_bytes,
                                        int swizzle, unsigned base_offset = 0) {
  const unsigned addr = smem_address(start);
  return static_cast<unsigned long long>((addr & 0x3FFFFu) >> 4) |
         (static_cast<unsigned long long>((lbo_bytes & 0x3FFFFu) >> 4) << 16) |
         (static_cast<unsigned long long>((sbo_bytes & 0x3FFFFu) >> 4) << 32) |
         (static_cast<unsigned long long>(base_offset & 7u) << 49) |
         (static_cast<unsigned long long>(swizzle & 3) << 62);
}

/// `desc` with its start address moved by `bytes` (a multiple of 16).
CC_DEVICE unsigned long long wgmma_desc_advance(unsigned long long desc, unsigned bytes) {
  const unsigned long long start = ((desc & 0x3FFFull) + (bytes >> 4)) & 0x3FFFull;
  return (desc & ~0x3FFFull) | start;
}

template <int N>
struct WgmmaPtx;   // the inline PTX of one N (sm_90a), below

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The operand lists of each accumulator count R = N / 2: D registers %0 .. %R-1, then the
// descriptors (or the 4 A registers and B's descriptor), scale-d and the immediates.
#define CC_WGMMA_D4 "{%0, %1, %2, %3}"
#define CC_WGMMA_SS4 " %4, %5, p, %7, %8, %9, %10;\n"
#define CC_WGMMA_SS_TF32_4 " %4, %5, p, %7, %8;\n"
#define CC_WGMMA_RS4 " {%4, %5, %6, %7}, %8, p, %10, %11, %12;\n"
#define CC_WGMMA_RS_TF32_4 " {%4, %5, %6, %7}, %8, p, %10, %11;\n"
#define CC_WGMMA_P_SS4 "setp.ne.b32 p, %6, 0;\n"
#define CC_WGMMA_P_RS4 "setp.ne.b32 p, %9, 0;\n"
#define CC_WGMMA_D8 "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define CC_WGMMA_SS8 " %8, %9, p, %11, %12, %13, %14;\n"
#define CC_WGMMA_SS_TF32_8 " %8, %9, p, %11, %12;\n"
#define CC_WGMMA_RS8 " {%8, %9, %10, %11}, %12, p, %14, %15, %16;\n"
#define CC_WGMMA_RS_TF32_8 " {%8, %9, %10, %11}, %12, p, %14, %15;\n"
#define CC_WGMMA_P_SS8 "setp.ne.b32 p, %10, 0;\n"
#define CC_WGMMA_P_RS8 "setp.ne.b32 p, %13, 0;\n"
#define CC_WGMMA_D16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define CC_WGMMA_SS16 " %16, %17, p, %19, %20, %21, %22;\n"
#define CC_WGMMA_SS_TF32_16 " %16, %17, p, %19, %20;\n"
#define CC_WGMMA_RS16 " {%16, %17, %18, %19}, %20, p, %22, %23, %24;\n"
#define CC_WGMMA_RS_TF32_16 " {%16, %17, %18, %19}, %20, p, %22, %23;\n"
#define CC_WGMMA_P_SS16 "setp.ne.b32 p, %18, 0;\n"
#define CC_WGMMA_P_RS16 "setp.ne.b32 p, %21, 0;\n"
#define CC_WGMMA_D32 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
  "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define CC_WGMMA_SS32 " %32, %33, p, %35, %36, %37, %38;\n"
#define CC_WGMMA_SS_TF32_32 " %32, %33, p, %35, %36;\n"
#define CC_WGMMA_RS32 " {%32, %33, %34, %35}, %36, p, %38, %39, %40;\n"
#define CC_WGMMA_RS_TF32_32 " {%32, %33, %34, %35}, %36, p, %38, %39;\n"
#define CC_WGMMA_P_SS32 "setp.ne.b32 p, %34, 0;\n"
#define CC_WGMMA_P_RS32 "setp.ne.b32 p, %37, 0;\n"
#define CC_WGMMA_D64 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
  "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, " \
  "%35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, " \
  "%52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define CC_WGMMA_SS64 " %64, %65, p, %67, %68, %69, %70;\n"
#define CC_WGMMA_SS_TF32_64 " %64, %65, p, %67, %68;\n"
#define CC_WGMMA_RS64 " {%64, %65, %66, %67}, %68, p, %70, %71, %72;\n"
#define CC_WGMMA_RS_TF32_64 " {%64, %65, %66, %67}, %68, p, %70, %71;\n"
#define CC_WGMMA_P_SS64 "setp.ne.b32 p, %66, 0;\n"
#define CC_WGMMA_P_RS64 "setp.ne.b32 p, %69, 0;\n"
#define CC_WGMMA_D128 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
  "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, " \
  "%35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, " \
  "%52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, " \
  "%69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, " \
  "%86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, " \
  "%102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, " \
  "%116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define CC_WGMMA_SS128 " %128, %129, p, %131, %132, %133, %134;\n"
#define CC_WGMMA_SS_TF32_128 " %128, %129, p, %131, %132;\n"
#define CC_WGMMA_RS128 " {%128, %129, %130, %131}, %132, p, %134, %135, %136;\n"
#define CC_WGMMA_RS_TF32_128 " {%128, %129, %130, %131}, %132, p, %134, %135;\n"
#define CC_WGMMA_P_SS128 "setp.ne.b32 p, %130, 0;\n"
#define CC_WGMMA_P_RS128 "setp.ne.b32 p, %133, 0;\n"

#define CC_WGMMA_F4(o) "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3])
#define CC_WGMMA_F8(o) CC_WGMMA_F4(o), CC_WGMMA_F4(o + 4)
#define CC_WGMMA_F16(o) CC_WGMMA_F8(o), CC_WGMMA_F8(o + 8)
#define CC_WGMMA_F32(o) CC_WGMMA_F16(o), CC_WGMMA_F16(o + 16)
#define CC_WGMMA_F64(o) CC_WGMMA_F32(o), CC_WGMMA_F32(o + 32)
#define CC_WGMMA_F128(o) CC_WGMMA_F64(o), CC_WGMMA_F64(o + 64)

#define CC_WGMMA_ASM_SS(N, R, TYPES, TAIL, ...)                                                   \
  asm volatile("{\n.reg .pred p;\n" CC_WGMMA_P_SS##R "wgmma.mma_async.sync.aligned.m64n" #N TYPES \
               " " CC_WGMMA_D##R "," TAIL "}\n"                                                    \
               : CC_WGMMA_F##R(0)                                                                  \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(1), "n"(1) __VA_ARGS__)
#define CC_WGMMA_ASM_RS(N, R, TYPES, TAIL, ...)                                                   \
  asm volatile("{\n.reg .pred p;\n" CC_WGMMA_P_RS##R "wgmma.mma_async.sync.aligned.m64n" #N TYPES \
               " " CC_WGMMA_D##R "," TAIL "}\n"                                                    \
               : CC_WGMMA_F##R(0)                                                                  \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(1),   \
                 "n"(1) __VA_ARGS__)

#define CC_WGMMA_DEFINE(N, R)                                                                      \
  template <>                                                                                      \
  struct WgmmaPtx<N> {                                                                             \
    template <int Type, int TA, int TB>                                                            \
    static CC_DEVICE void ss(float* d, unsigned long long desc_a, unsigned long long desc_b,       \
                             int scale_d) {                                                        \
      if constexpr (Type == kWgmmaF16) {                                                           \
        CC_WGMMA_ASM_SS(N, R, "k16.f32.f16.f16", CC_WGMMA_SS##R, , "n"(TA), "n"(TB));              \
      } else if constexpr (Type == kWgmmaBF16) {                                                   \
        CC_WGMMA_ASM_SS(N, R, "k16.f32.bf16.bf16", CC_WGMMA_SS##R, , "n"(TA), "n"(TB));            \
      } else {                                                                                     \
        CC_WGMMA_ASM_SS(N, R, "k8.f32.tf32.tf32", CC_WGMMA_SS_TF32_##R);                           \
      }                                                                                            \
    }                                                                                              \
    template <int Type, int TB>                                                                    \
    static CC_DEVICE void rs(float* d, const unsigned* a, unsigned long long desc_b, int scale_d) { \
      if constexpr (Type == kWgmmaF16) {                                                           \
        CC_WGMMA_ASM_RS(N, R, "k16.f32.f16.f16", CC_WGMMA_RS##R, , "n"(TB));                       \
      } else if constexpr (Type == kWgmmaBF16) {                                                   \
        CC_WGMMA_ASM_RS(N, R, "k16.f32.bf16.bf16", CC_WGMMA_RS##R, , "n"(TB));                     \
      } else {                                                                                     \
        CC_WGMMA_ASM_RS(N, R, "k8.f32.tf32.tf32", CC_WGMMA_RS_TF32_##R);                           \
      }                                                                                            \
    }                                                                                              \
  };

CC_WGMMA_DEFINE(8, 4)
CC_WGMMA_DEFINE(16, 8)
CC_WGMMA_DEFINE(32, 16)
CC_WGMMA_DEFINE(64, 32)
CC_WGMMA_DEFINE(128, 64)
CC_WGMMA_DEFINE(256, 128)
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <int Type, int N, int TransA, int TransB>
struct WgmmaCheck {
  static_assert(Type == kWgmmaF16 || Type == kWgmmaBF16 || Type == kWgmmaTF32,
                "the wgmma type is cc::kWgmmaF16, kWgmmaBF16 or kWgmmaTF32");
  static_assert(Type != kWgmmaTF32 || (TransA == 0 && TransB == 0),
                "the wgmma transpose bits exist for f16 and bf16 only");
  static_assert(WgmmaShape<N>::kRegs > 0 && kHasWgmma,
                "cc::wgmma needs sm_90a (an arch-specific kernel family)");
  static constexpr bool ok = true;
};

/// wgmma.mma_async m64nNk16 (f16, bf16) or m64nNk8 (tf32) with f32 accumulation, A and B
/// from shared memory: acc (64 x N) = A * B + acc (scale_d != 0) or A * B.
template <int Type, int N, int TransA = 0, int TransB = 0>
CC_DEVICE void wgmma(float (&d)[WgmmaShape<N>::kRegs], unsigned long long desc_a,
                     unsigned long long desc_b, int scale_d = 1 CUPYCONV_MMA_SITE_PARAM) {
  static_assert(WgmmaCheck<Type, N, TransA, TransB>::ok, "");
#if defined(CUPYCONV_DEVICE_EMULATED)
  ::cupyconv_emu::detail::wgmma_mma(CUPYCONV_MMA_SITE, static_cast<::cupyconv_emu::detail::WgmmaType>(Type),
                                    N, d, desc_a, nullptr, desc_b, TransA != 0, TransB != 0, scale_d);
#elif defined(CUPYCONV_HAS_WGMMA)
  WgmmaPtx<N>::template ss<Type, TransA, TransB>(d, desc_a, desc_b, scale_d);
#endif
}

/// The same with A from registers (4 per thread, cc::WgmmaFragment::a16 / a_tf32).
template <int Type, int N, int TransB = 0>
CC_DEVICE void wgmma_rs(float (&d)[WgmmaShape<N>::kRegs], const unsigned (&a)[4],
                        unsigned long long desc_b, int scale_d = 1 CUPYCONV_MMA_SITE_PARAM) {
  static_assert(WgmmaCheck<Type, N, 0, TransB>::ok, "");
#if defined(CUPYCONV_DEVICE_EMULATED)
  ::cupyconv_emu::detail::wgmma_mma(CUPYCONV_MMA_SITE, static_cast<::cupyconv_emu::detail::WgmmaType>(Type),
                                    N, d, 0, a, desc_b, false, TransB != 0, scale_d);
#elif defined(CUPYCONV_HAS_WGMMA)
  WgmmaPtx<N>::template rs<Type, TransB>(d, a, desc_b, scale_d);
#endif
}

// The instructions without operands: the emulator's call, the PTX on sm_90a.
#if defined(CUPYCONV_DEVICE_EMULATED)
#define CC_WGMMA_NO_OPERANDS(emulated, ptx) ::cupyconv_emu::detail::emulated()
#elif defined(CUPYCONV_HAS_WGMMA)
#define CC_WGMMA_NO_OPERANDS(emulated, ptx) asm volatile(ptx "\n" ::: "memory")
#else
#define CC_WGMMA_NO_OPERANDS(emulated, ptx) static_cast<void>(0)
#endif

/// wgmma.fence.sync.aligned: orders register accesses before the next wgmma.mma_async.
CC_DEVICE void wgmma_fence() { CC_WGMMA_NO_OPERANDS(wgmma_fence, "wgmma.fence.sync.aligned;"); }

/// wgmma.commit_group.sync.aligned: the wgmma issued since the last commit form a group.
CC_DEVICE void wgmma_commit_group() {
  CC_WGMMA_NO_OPERANDS(wgmma_commit_group, "wgmma.commit_group.sync.aligned;");
}

/// fence.proxy.async.shared::cta: this thread's shared-memory writes become visible to the
/// async proxy (wgmma operands, TMA).
CC_DEVICE void fence_proxy_async() {
  CC_WGMMA_NO_OPERANDS(fence_proxy_async, "fence.proxy.async.shared::cta;");
}

/// wgmma.wait_group.sync.aligned N: all groups but the newest N are complete.
template <int N>
CC_DEVICE void wgmma_wait_group(int cupyconv_unused_ = 0 CUPYCONV_MMA_SITE_PARAM) {
  static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0..7");
  (void)cupyconv_unused_;
#if defined(CUPYCONV_DEVICE_EMULATED)
  ::cupyconv_emu::detail::wgmma_wait_group(CUPYCONV_MMA_SITE, N);
#elif defined(CUPYCONV_HAS_WGMMA)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

// The mbarrier instructions on (barrier, 32-bit value) without a result.
#if defined(CUPYCONV_DEVICE_EMULATED)
#define CC_MBARRIER_SET(emulated, ptx) ::cupyconv_emu::detail::emulated(bar, value)
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define CC_MBARRIER_SET(emulated, ptx) \
  asm volatile(ptx " [%0], %1;\n" ::"r"(smem_address(bar)), "r"(value) : "memory")
#else
#define CC_MBARRIER_SET(emulated, ptx) static_cast<void>(value)
#endif

/// mbarrier.init.shared::cta.b64: `value` arrivals complete a phase.
CC_DEVICE void mbarrier_init(unsigned long long* bar, unsigned value) {
  CC_MBARRIER_SET(mbarrier_init, "mbarrier.init.shared::cta.b64");
}

/// mbarrier.expect_tx.shared::cta.b64: the current phase also waits for `value` bytes.
CC_DEVICE void mbarrier_expect_tx(unsigned long long* bar, unsigned value) {
  CC_MBARRIER_SET(mbarrier_expect_tx, "mbarrier.expect_tx.shared::cta.b64");
}

/// mbarrier.complete_tx.shared::cta.b64: `value` bytes of the expected transactions are done.
CC_DEVICE void mbarrier_complete_tx(unsigned long long* bar, unsigned value) {
  CC_MBARRIER_SET(mbarrier_complete_tx, "mbarrier.complete_tx.shared::cta.b64");
}

/// mbarrier.arrive.shared::cta.b64: one arrival; returns the phase token.
CC_DEVICE unsigned long long mbarrier_arrive(unsigned long long* bar) {
#if defined(CUPYCONV_DEVICE_EMULATED)
  return ::cupyconv_emu::detail::mbarrier_arrive(bar, 0);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned long long state;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];\n" : "=l"(state) : "r"(smem_address(bar)) : "memory");
  return state;
#else
  return 0;
#endif
}

/// mbarrier.arrive.expect_tx.shared::cta.b64: expect `bytes` more transaction bytes, arrive.
CC_DEVICE unsigned long long mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
#if defined(CUPYCONV_DEVICE_EMULATED)
  return ::cupyconv_emu::detail::mbarrier_arrive(bar, bytes);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned long long state;
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;\n"
               : "=l"(state) : "r"(smem_address(bar)), "r"(bytes) : "memory");
  return state;
#else
  return 0;
#endif
}

/// mbarrier.try_wait.parity.shared::cta.b64: whether the phase of `parity` has completed.
CC_DEVICE bool mbarrier_try_wait_parity(unsigned long long* bar, unsigned parity CUPYCONV_MMA_SITE_PARAM) {
#if defined(CUPYCONV_DEVICE_EMULATED)
  return ::cupyconv_emu::detail::mbarrier_try_wait_parity(CUPYCONV_MMA_SITE, bar, parity);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned ok;
  asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
               "selp.b32 %0, 1, 0, p;\n}\n"
               : "=r"(ok) : "r"(smem_address(bar)), "r"(parity) : "memory");
  return ok != 0;
#else
  return true;
#endif
}

/// Polls mbarrier_try_wait_parity until the phase of `parity` has completed.
CC_DEVICE void mbarrier_wait_parity(unsigned long long* bar, unsigned parity CUPYCONV_MMA_SITE_PARAM) {
#if defined(CUPYCONV_DEVICE_EMULATED)
  while (!::cupyconv_emu::detail::mbarrier_try_wait_parity(CUPYCONV_MMA_SITE, bar, parity)) {
  }
#else
  while (!mbarrier_try_wait_parity(bar, parity)) {
  }
#endif
}

}  // namespace cc
