// cupyconv: the deterministic reduction step of the split-K weight gradient (issue 26).
//
//   splitk_reduce<T, Acc, R, Index>(SplitkReduceParams p, const T* parts, T* y)
//
//   y[b][i] = from_accum<T>( sum_{s = 0 .. S-1} to_accum<Acc>(parts[b][s][i]) ),
//   b < outer, i < inner, S = p.parts,
//
// summed in that fixed order, one addition per part in the accumulation type Acc, and
// rounded once to T.  `parts` is contiguous (outer, S, inner): the output of the weight
// gradient's forward problem with its images split into S groups (the S partial weight
// gradients of each of the batch's C/G "images", cupyconv/backends/cuda/implicit_grads.py),
// and `y` the contiguous (outer, inner) forward output the unsplit problem would have
// written.  No atomics: every output is one thread's, so two runs are bitwise identical
// and any schedule gives the same bits.  The code is rank-independent (the partials are
// flat); R is not used: it puts one instance in each rank's compilation group (the unit of
// the kernel caches and the prebuilt wheels), next to the tiles whose partials it sums.
//
// Launch: 1-D grid of any size (grid-stride over outer * inner), blocks of
// CUPYCONV_BLOCK_THREADS threads, no shared memory.  The host mirror of the parameters is
// cupyconv/_kernels/splitk_launch.py.
#include "../platform.cuh"
#include "../common/conv_common.cuh"

namespace cc {

/// Parameters of one reduction launch (8-byte fields).
struct SplitkReduceParams {
  long long outer;   ///< leading extent of parts and y (the forward problem's batch, C/G)
  long long parts;   ///< S, the partials summed per output
  long long inner;   ///< elements of one partial per leading index
  long long total;   ///< outer * inner
};
static_assert(sizeof(SplitkReduceParams) == 8 * 4,
              "SplitkReduceParams: 4 words (mirrored by cupyconv/_kernels/splitk_launch.py)");

}  // namespace cc

template <typename T, typename Acc, int R, typename Index>
__global__ void CUPYCONV_LAUNCH_BOUNDS
splitk_reduce(const cc::SplitkReduceParams p, const T* __restrict__ parts,
              T* __restrict__ y) {
  static_assert(cc::IsIndexType<Index>::value, "Index must be int or long long");
  cc::require_block_shape();
  const Index inner = static_cast<Index>(p.inner);
  const Index S = static_cast<Index>(p.parts);
  for (long long t = cc::global_thread_id(); t < p.total; t += cc::global_thread_count()) {
    const Index b = static_cast<Index>(t) / inner;
    const Index i = static_cast<Index>(t) - b * inner;
    const T* __restrict__ src = parts + b * S * inner + i;
    Acc acc = cc::to_accum<Acc>(src[0]);
    for (Index s = 1; s < S; ++s) acc += cc::to_accum<Acc>(src[s * inner]);
    y[t] = cc::from_accum<T>(acc);
  }
}
