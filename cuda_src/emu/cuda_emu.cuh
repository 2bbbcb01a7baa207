// cupyconv CUDA emulation layer: compiles CUDA C++ kernel sources with a host
// C++17 compiler and runs them on the CPU.
//
// Every CUDA thread of a block runs as a cooperative fiber on the calling OS
// thread; blocks run one at a time.  Barriers and warp collectives are real
// rendezvous points between fibers, so a launch is sequentially consistent
// and deterministic for a given schedule.  See docs/emulation.md.
//
// Include through "platform.cuh", never directly from kernel sources.
//
// Configuration macros (set by cupyconv._emulation):
//   CUPYCONV_EMU_FORCE_UCONTEXT  use glibc ucontext even if boost.context exists
//   CUPYCONV_EMU_STACK_SIZE      bytes of stack per CUDA thread
#ifndef CUPYCONV_EMU_CUDA_EMU_CUH
#define CUPYCONV_EMU_CUDA_EMU_CUH

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#error "cuda_emu.cuh is the host emulation layer; include platform.cuh instead"
#endif

// All standard headers come first: some CUDA keyword macros defined below
// (e.g. __noinline__) would otherwise clash with attribute spellings used
// inside libstdc++.  Kernel sources must not include standard headers.
#include <math.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define CUPYCONV_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUPYCONV_EMU_ASAN 1
#endif
#endif
#ifndef CUPYCONV_EMU_ASAN
#define CUPYCONV_EMU_ASAN 0
#endif

// Fiber backend: boost.context fibers are ~20x faster than ucontext (no
// signal-mask syscalls per switch).  Under AddressSanitizer the ucontext
// backend is used because every switch must be annotated for ASan.
#if !CUPYCONV_EMU_ASAN && !defined(CUPYCONV_EMU_FORCE_UCONTEXT) && \
    defined(__has_include)
#if __has_include(<boost/context/fiber.hpp>)
#define CUPYCONV_EMU_USE_BOOST 1
#endif
#endif
#ifndef CUPYCONV_EMU_USE_BOOST
#define CUPYCONV_EMU_USE_BOOST 0
#endif

#if CUPYCONV_EMU_USE_BOOST
#include <boost/context/fiber.hpp>
#else
#include <ucontext.h>
#endif
#if CUPYCONV_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#ifndef CUPYCONV_EMU_STACK_SIZE
#if CUPYCONV_EMU_ASAN
#define CUPYCONV_EMU_STACK_SIZE (512 * 1024)
#else
#define CUPYCONV_EMU_STACK_SIZE (128 * 1024)
#endif
#endif

#define CUPYCONV_DEVICE_EMULATED 1

// ---------------------------------------------------------------------------
// CUDA keywords
// ---------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __grid_constant__
// One block runs at a time on one OS thread, so function-level static
// storage is per block.  Declare __shared__ variables without initializer,
// as CUDA requires.  A plain __shared__ variable keeps its contents from one
// block to the next; declare shared arrays with CUPYCONV_STATIC_SHARED
// (platform.cuh) to have them poisoned per block (emu_memory.cuh).
#define __shared__ static

#include "emu_types.cuh"
#include "emu_math.cuh"
#include "emu_fiber.cuh"
#include "emu_runtime.cuh"
#include "emu_sync.cuh"
#include "emu_memory.cuh"
#include "emu_mma.cuh"
#include "emu_wgmma.cuh"
#include "emu_mbarrier.cuh"

#endif  // CUPYCONV_EMU_CUDA_EMU_CUH
