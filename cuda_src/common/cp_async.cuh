// cupyconv: asynchronous global -> shared copies (cp.async), one API on both sides.
//
//   cc::cp_async<Bytes>(smem_dst, gmem_src)                   copy Bytes (4, 8 or 16)
//   cc::cp_async_zfill<Bytes>(smem_dst, gmem_src, src_bytes)  copy src_bytes, zero the rest
//   cc::cp_async_commit()                                     close the group of copies issued
//   cc::cp_async_wait_group<N>()                              all groups but the newest N landed
//   cc::cp_async_wait_all()                                   every copy landed
//
// The destination must be shared memory (CUPYCONV_DYNAMIC_SHARED or
// CUPYCONV_STATIC_SHARED), both addresses aligned to Bytes.  A copy is only
// guaranteed to have landed after the wait that covers its group, and only
// for the issuing thread: other threads read it after a __syncthreads() that
// follows the wait.
//
// Under NVRTC on sm_80+ these are the PTX instructions cp.async.ca.shared.global
// (LDGSTS in SASS), cp.async.commit_group, cp.async.wait_group and
// cp.async.wait_all; on older archs the copy is a plain load and store and
// commit/wait do nothing.  Under the CPU emulator (cuda_src/emu/emu_memory.cuh)
// a copy reads its source at issue, poisons its destination (0xCD bytes) and
// lands only at the wait, so a missing wait reads garbage.
#pragma once
#include "types.cuh"

#if (defined(__CUDACC__) || defined(__CUDACC_RTC__)) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define CUPYCONV_HAS_CP_ASYNC 1
#endif

namespace cc {

template <int Bytes>
struct CpAsyncSize {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
  static constexpr int value = Bytes;
};

#if defined(CUPYCONV_HAS_CP_ASYNC)
/// 32-bit shared-state-space address of a generic pointer to shared memory.
CC_DEVICE unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
#endif

/// Copies `src_bytes` (0..Bytes) bytes from global memory and zero-fills the
/// rest of the Bytes at `smem_dst` (src_bytes == 0: zeros, `gmem_src` not read).
template <int Bytes>
CC_DEVICE void cp_async_zfill(void* smem_dst, const void* gmem_src, int src_bytes) {
  constexpr int kBytes = CpAsyncSize<Bytes>::value;
#if defined(CUPYCONV_DEVICE_EMULATED)
  ::cupyconv_emu::detail::cp_async(smem_dst, gmem_src, kBytes, src_bytes);
#elif defined(CUPYCONV_HAS_CP_ASYNC)
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n"
               :: "r"(shared_address(smem_dst)), "l"(gmem_src), "n"(kBytes), "r"(src_bytes)
               : "memory");
#else
  unsigned char* d = static_cast<unsigned char*>(smem_dst);
  const unsigned char* s = static_cast<const unsigned char*>(gmem_src);
  for (int i = 0; i < kBytes; ++i) d[i] = i < src_bytes ? s[i] : static_cast<unsigned char>(0);
#endif
}

/// Copies Bytes bytes from global memory to `smem_dst`.
template <int Bytes>
CC_DEVICE void cp_async(void* smem_dst, const void* gmem_src) {
  constexpr int kBytes = CpAsyncSize<Bytes>::value;
#if defined(CUPYCONV_HAS_CP_ASYNC)
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n"
               :: "r"(shared_address(smem_dst)), "l"(gmem_src), "n"(kBytes) : "memory");
#else
  cp_async_zfill<kBytes>(smem_dst, gmem_src, kBytes);
#endif
}

/// Closes the group of the copies this thread issued since the last commit.
CC_DEVICE void cp_async_commit() {
#if defined(CUPYCONV_DEVICE_EMULATED)
  ::cupyconv_emu::detail::cp_async_commit();
#elif defined(CUPYCONV_HAS_CP_ASYNC)
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/// Waits until at most the N newest committed groups of this thread are in flight.
template <int N>
CC_DEVICE void cp_async_wait_group() {
  static_assert(N >= 0, "cp.async.wait_group takes a non-negative group count");
#if defined(CUPYCONV_DEVICE_EMULATED)
  ::cupyconv_emu::detail::cp_async_wait_group(N);
#elif defined(CUPYCONV_HAS_CP_ASYNC)
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
#endif
}

/// Waits until every copy this thread issued (committed or not) has landed.
CC_DEVICE void cp_async_wait_all() {
#if defined(CUPYCONV_DEVICE_EMULATED)
  ::cupyconv_emu::detail::cp_async_wait_all();
#elif defined(CUPYCONV_HAS_CP_ASYNC)
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

}  // namespace cc
