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

#else

#include "emu/cuda_emu.cuh"
#define CUPYCONV_DYNAMIC_SHARED(T, name) \
  T* const name = reinterpret_cast<T*>(::cupyconv_emu::detail::dynamic_shared())

#endif

#endif  // CUPYCONV_PLATFORM_CUH
