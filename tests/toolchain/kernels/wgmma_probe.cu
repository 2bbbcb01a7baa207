// A stand-in arch-specific kernel for the toolchain tests: raw inline-PTX warpgroup MMA
// (wgmma.fence / mma_async / commit_group / wait_group), float16 m64n8k16 and TF32 m64n8k8
// with shared-memory descriptors.  It builds for sm_90a only: ptxas rejects every wgmma
// instruction for sm_90.  It is compiled, never run (the emulated wgmma API is
// cuda_src/common/wgmma.cuh).
template <typename T, int R, typename I>
__global__ void wgmma_probe(T* y, unsigned long long desc_a, unsigned long long desc_b) {
  float d[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(desc_a), "l"(desc_b), "r"(R));
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%0, %1, %2, %3}, %4, %5, p, 1, 1;\n"
      "}\n"
      : "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(desc_a + 2), "l"(desc_b + 2), "r"(R));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  for (int i = 0; i < 8; ++i) y[static_cast<I>(threadIdx.x) * 8 + i] = static_cast<T>(d[i]);
}
