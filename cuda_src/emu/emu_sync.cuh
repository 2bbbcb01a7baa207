// Kernel-facing CUDA built-ins of the emulation layer: threadIdx & co.,
// barriers, warp collectives and atomics.  Included by cuda_emu.cuh only.
#ifndef CUPYCONV_EMU_SYNC_CUH
#define CUPYCONV_EMU_SYNC_CUH

// ---------------------------------------------------------------------------
// Built-in variables (read-only views of the running fiber's state)
// ---------------------------------------------------------------------------
#define threadIdx (::cupyconv_emu::detail::cur_thread_idx())
#define blockIdx (::cupyconv_emu::detail::cur_block_idx())
#define blockDim (::cupyconv_emu::detail::cur_block_dim())
#define gridDim (::cupyconv_emu::detail::cur_grid_dim())
constexpr int warpSize = 32;

#define CUPYCONV_EMU_SITE (::cupyconv_emu::detail::Site{__FILE__, __LINE__})

namespace cupyconv_emu {
namespace detail {

/// Block-wide barrier; `pred` feeds the count/and/or variants.
inline int block_barrier(Site site, Op op, int pred) {
  return static_cast<int>(collective(Wait::kBlock, op, site, 0, -1, pred != 0));
}

inline unsigned lane_id() { return t_thread->tid & 31u; }

/// Common checks of warp collectives: the caller must be in `mask`.
inline void check_mask(Site site, unsigned mask, const char* what) {
  if (!((mask >> lane_id()) & 1u)) {
    fail_here(describe_thread(*t_thread) + " calls " + what + " at " + site.file + ":" +
              std::to_string(site.line) + " with mask " + hex(mask) +
              " that does not contain its own lane " + std::to_string(lane_id()));
  }
}

inline void check_width(Site site, int width) {
  if (width < 1 || width > 32 || (width & (width - 1)) != 0) {
    fail_here("shuffle width " + std::to_string(width) + " at " + site.file + ":" +
              std::to_string(site.line) + " is not a power of two in [1, 32]");
  }
}

inline std::uint64_t warp_collective(Site site, Op op, unsigned mask, int src_lane,
                                     std::uint64_t value) {
  check_mask(site, mask, op_name(op));
  return collective(Wait::kWarp, op, site, mask, src_lane, value);
}

/// Exchange `var` with the lane `src` (absolute lane in the warp, -1 = own).
template <class T>
inline T shuffle(Site site, unsigned mask, T var, int src) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                "shuffles move trivially copyable values of at most 8 bytes");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &var, sizeof(T));
  const std::uint64_t r = warp_collective(site, Op::kShfl, mask, src, bits);
  T out;
  std::memcpy(&out, &r, sizeof(T));
  return out;
}

template <class T>
inline T shfl_idx(Site site, unsigned mask, T var, int src_lane, int width = 32) {
  check_width(site, width);
  const int lane = static_cast<int>(lane_id());
  return shuffle(site, mask, var, (lane & ~(width - 1)) + (src_lane & (width - 1)));
}

template <class T>
inline T shfl_up(Site site, unsigned mask, T var, unsigned delta, int width = 32) {
  check_width(site, width);
  const int lane = static_cast<int>(lane_id());
  const bool ok = static_cast<unsigned>(lane & (width - 1)) >= delta;
  return shuffle(site, mask, var, ok ? lane - static_cast<int>(delta) : -1);
}

template <class T>
inline T shfl_down(Site site, unsigned mask, T var, unsigned delta, int width = 32) {
  check_width(site, width);
  const int lane = static_cast<int>(lane_id());
  const bool ok = static_cast<unsigned>(lane & (width - 1)) + delta < static_cast<unsigned>(width);
  return shuffle(site, mask, var, ok ? lane + static_cast<int>(delta) : -1);
}

template <class T>
inline T shfl_xor(Site site, unsigned mask, T var, int lane_mask, int width = 32) {
  check_width(site, width);
  const int lane = static_cast<int>(lane_id());
  const int src = lane ^ lane_mask;
  const int max_lane = (lane & ~(width - 1)) + width - 1;  // PTX shfl.bfly clamp
  return shuffle(site, mask, var, (src >= 0 && src <= max_lane) ? src : -1);
}

inline unsigned vote(Site site, Op op, unsigned mask, int pred) {
  return static_cast<unsigned>(warp_collective(site, op, mask, -1, pred != 0));
}

/// `SyncwarpAt{site}(mask)`: lets the __syncwarp macro take an optional mask
/// portably (no __VA_OPT__ / GNU comma swallowing needed).
struct SyncwarpAt {
  Site site;  ///< call site of the __syncwarp
  void operator()(unsigned mask = 0xffffffffu) const {
    warp_collective(site, Op::kSyncwarp, mask, -1, 0);
  }
};

/// Lanes of the caller's warp that have not exited (no divergence tracking).
inline unsigned active_mask() {
  const unsigned base = t_thread->tid & ~31u;
  unsigned m = 0;
  for (unsigned l = 0; l < 32 && base + l < t_launch->nthreads; ++l) {
    const Wait w = t_launch->threads[base + l].wait;
    if (w != Wait::kDone && w != Wait::kFailed) m |= 1u << l;
  }
  return m;
}

template <class T>
inline T reduce(Site site, Op op, unsigned mask, T value) {
  const std::uint64_t v = std::is_signed<T>::value
                              ? static_cast<std::uint64_t>(static_cast<std::int64_t>(value))
                              : static_cast<std::uint64_t>(value);
  return static_cast<T>(warp_collective(site, op, mask, -1, v));
}

}  // namespace detail
}  // namespace cupyconv_emu

// ---------------------------------------------------------------------------
// Barriers and warp collectives (macros capture the call site for errors)
// ---------------------------------------------------------------------------
#define __syncthreads()                                                                        \
  ((void)::cupyconv_emu::detail::block_barrier(CUPYCONV_EMU_SITE,                              \
                                               ::cupyconv_emu::detail::Op::kSyncthreads, 0))
#define __syncthreads_count(pred) \
  ::cupyconv_emu::detail::block_barrier(CUPYCONV_EMU_SITE, ::cupyconv_emu::detail::Op::kSyncthreadsCount, (pred))
#define __syncthreads_and(pred) \
  ::cupyconv_emu::detail::block_barrier(CUPYCONV_EMU_SITE, ::cupyconv_emu::detail::Op::kSyncthreadsAnd, (pred))
#define __syncthreads_or(pred) \
  ::cupyconv_emu::detail::block_barrier(CUPYCONV_EMU_SITE, ::cupyconv_emu::detail::Op::kSyncthreadsOr, (pred))
#define __syncwarp(...) ::cupyconv_emu::detail::SyncwarpAt{CUPYCONV_EMU_SITE}(__VA_ARGS__)
#define __shfl_sync(...) ::cupyconv_emu::detail::shfl_idx(CUPYCONV_EMU_SITE, __VA_ARGS__)
#define __shfl_up_sync(...) ::cupyconv_emu::detail::shfl_up(CUPYCONV_EMU_SITE, __VA_ARGS__)
#define __shfl_down_sync(...) ::cupyconv_emu::detail::shfl_down(CUPYCONV_EMU_SITE, __VA_ARGS__)
#define __shfl_xor_sync(...) ::cupyconv_emu::detail::shfl_xor(CUPYCONV_EMU_SITE, __VA_ARGS__)
#define __ballot_sync(mask, pred) \
  ::cupyconv_emu::detail::vote(CUPYCONV_EMU_SITE, ::cupyconv_emu::detail::Op::kBallot, (mask), (pred))
#define __any_sync(mask, pred) \
  static_cast<int>(::cupyconv_emu::detail::vote(CUPYCONV_EMU_SITE, ::cupyconv_emu::detail::Op::kAny, (mask), (pred)))
#define __all_sync(mask, pred) \
  static_cast<int>(::cupyconv_emu::detail::vote(CUPYCONV_EMU_SITE, ::cupyconv_emu::detail::Op::kAll, (mask), (pred)))
#define __activemask() ::cupyconv_emu::detail::active_mask()
#define __reduce_add_sync(mask, v) \
  ::cupyconv_emu::detail::reduce(CUPYCONV_EMU_SITE, ::cupyconv_emu::detail::Op::kReduceAdd, (mask), (v))
#define __reduce_min_sync(mask, v)                                                        \
  ::cupyconv_emu::detail::reduce(CUPYCONV_EMU_SITE,                                       \
                                 std::is_signed<decltype(v)>::value                       \
                                     ? ::cupyconv_emu::detail::Op::kReduceMinI            \
                                     : ::cupyconv_emu::detail::Op::kReduceMinU,           \
                                 (mask), (v))
#define __reduce_max_sync(mask, v)                                                        \
  ::cupyconv_emu::detail::reduce(CUPYCONV_EMU_SITE,                                       \
                                 std::is_signed<decltype(v)>::value                       \
                                     ? ::cupyconv_emu::detail::Op::kReduceMaxI            \
                                     : ::cupyconv_emu::detail::Op::kReduceMaxU,           \
                                 (mask), (v))

// ---------------------------------------------------------------------------
// Atomics: fibers never switch inside these, so plain read-modify-write is
// atomic.  Integer arithmetic wraps as on the GPU (done in unsigned).
// ---------------------------------------------------------------------------
namespace cupyconv_emu {
namespace detail {
template <class T, class F>
inline T atomic_rmw(T* address, F f) {
  const T old = *address;
  *address = f(old);
  return old;
}
template <class T>
using unsigned_of = std::make_unsigned_t<T>;
template <class T>
inline T wrap_add(T a, T b) {
  return static_cast<T>(static_cast<unsigned_of<T>>(a) + static_cast<unsigned_of<T>>(b));
}
}  // namespace detail
}  // namespace cupyconv_emu

#define CUPYCONV_EMU_ATOMIC_INT(T)                                                               \
  inline T atomicAdd(T* a, T v) {                                                                \
    return ::cupyconv_emu::detail::atomic_rmw(a, [v](T o) { return ::cupyconv_emu::detail::wrap_add(o, v); }); \
  }                                                                                              \
  inline T atomicSub(T* a, T v) {                                                                \
    return ::cupyconv_emu::detail::atomic_rmw(a, [v](T o) {                                      \
      return static_cast<T>(static_cast<std::make_unsigned_t<T>>(o) - static_cast<std::make_unsigned_t<T>>(v)); }); \
  }                                                                                              \
  inline T atomicExch(T* a, T v) { return ::cupyconv_emu::detail::atomic_rmw(a, [v](T) { return v; }); } \
  inline T atomicMin(T* a, T v) { return ::cupyconv_emu::detail::atomic_rmw(a, [v](T o) { return v < o ? v : o; }); } \
  inline T atomicMax(T* a, T v) { return ::cupyconv_emu::detail::atomic_rmw(a, [v](T o) { return v > o ? v : o; }); } \
  inline T atomicAnd(T* a, T v) { return ::cupyconv_emu::detail::atomic_rmw(a, [v](T o) { return static_cast<T>(o & v); }); } \
  inline T atomicOr(T* a, T v) { return ::cupyconv_emu::detail::atomic_rmw(a, [v](T o) { return static_cast<T>(o | v); }); } \
  inline T atomicXor(T* a, T v) { return ::cupyconv_emu::detail::atomic_rmw(a, [v](T o) { return static_cast<T>(o ^ v); }); } \
  inline T atomicCAS(T* a, T cmp, T v) {                                                         \
    return ::cupyconv_emu::detail::atomic_rmw(a, [cmp, v](T o) { return o == cmp ? v : o; });    \
  }
CUPYCONV_EMU_ATOMIC_INT(int)
CUPYCONV_EMU_ATOMIC_INT(unsigned int)
CUPYCONV_EMU_ATOMIC_INT(long long)
CUPYCONV_EMU_ATOMIC_INT(unsigned long long)
#undef CUPYCONV_EMU_ATOMIC_INT

inline float atomicAdd(float* a, float v) {
  return ::cupyconv_emu::detail::atomic_rmw(a, [v](float o) { return o + v; });
}
inline double atomicAdd(double* a, double v) {
  return ::cupyconv_emu::detail::atomic_rmw(a, [v](double o) { return o + v; });
}
inline float atomicExch(float* a, float v) {
  return ::cupyconv_emu::detail::atomic_rmw(a, [v](float) { return v; });
}
inline unsigned short atomicCAS(unsigned short* a, unsigned short cmp, unsigned short v) {
  return ::cupyconv_emu::detail::atomic_rmw(a, [cmp, v](unsigned short o) { return o == cmp ? v : o; });
}
/// ((old >= limit) ? 0 : old + 1), as CUDA's atomicInc.
inline unsigned int atomicInc(unsigned int* a, unsigned int limit) {
  return ::cupyconv_emu::detail::atomic_rmw(a, [limit](unsigned int o) { return o >= limit ? 0u : o + 1u; });
}
/// ((old == 0 || old > limit) ? limit : old - 1), as CUDA's atomicDec.
inline unsigned int atomicDec(unsigned int* a, unsigned int limit) {
  return ::cupyconv_emu::detail::atomic_rmw(
      a, [limit](unsigned int o) { return (o == 0u || o > limit) ? limit : o - 1u; });
}

#endif  // CUPYCONV_EMU_SYNC_CUH
