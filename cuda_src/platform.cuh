// cupyconv platform header: include first in every kernel source.
//
// Under nvcc / NVRTC it selects real CUDA and defines CUPYCONV_DEVICE_CUDA.
// Otherwise (a host C++17 compiler) it pulls in the CPU emulation layer and
// defines CUPYCONV_DEVICE_EMULATED.  Test with #ifdef; exactly one is defined.
//
// CUPYCONV_DYNAMIC_SHARED(T, name) declares `T* const name` pointing to the
// block's dynamic shared memory (16-byte aligned; size given at launch).  It
// works in templates instantiated with different T in one module, which a
// plain `extern __shared__ T name[]` does not.  Use it once per function.
//
// CUPYCONV_STATIC_SHARED(T, name, dims) declares the static shared array
// `T name dims`, 16-byte aligned (e.g. CUPYCONV_STATIC_SHARED(float, tile, [2][8][64]);).
// On the GPU it is `__shared__ __align__(16) T name dims`.  Under the emulator
// the array is poisoned (0xCD bytes) when the block first reaches the
// declaration, as dynamic shared memory is before every block, so a block
// that reads what it never wrote fails instead of seeing the previous
// block's values; a plain `__shared__` variable is not poisoned there.
//
// Nothing from the C++ standard library may be included on the CUDA side:
// NVRTC ships no standard headers.
#ifndef CUPYCONV_PLATFORM_CUH
#define CUPYCONV_PLATFORM_CUH

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

#define CUPYCONV_DEVICE_CUDA 1
#if !defined(CUPYCONV_NO_FP16)
#include <cuda_fp16.h>
#endif
#define CUPYCONV_DYNAMIC_SHARED(T, name)                                  \
  extern __shared__ __align__(16) unsigned char cupyconv_dynamic_smem_[]; \
  T* const name = reinterpret_cast<T*>(cupyconv_dynamic_smem_)
#define CUPYCONV_STATIC_SHARED(T, name, dims) __shared__ __align__(16) T name dims

#else

#include "emu/cuda_emu.cuh"
#define CUPYCONV_DYNAMIC_SHARED(T, name) \
  T* const name = reinterpret_cast<T*>(::cupyconv_emu::detail::dynamic_shared())
#define CUPYCONV_STATIC_SHARED(T, name, dims)                                         \
  alignas(16) static T name dims;                                                     \
  static std::uint64_t name##_cupyconv_epoch_ = 0;                                    \
  ::cupyconv_emu::detail::poison_static_shared(&name, sizeof(name), name##_cupyconv_epoch_)

#endif

#endif  // CUPYCONV_PLATFORM_CUH
