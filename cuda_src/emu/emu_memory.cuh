// Shared-memory checks of the emulation layer: per-block poisoning of static
// shared arrays and an emulated cp.async whose copies land only at the wait.
// Included by cuda_emu.cuh only; kernels use CUPYCONV_STATIC_SHARED
// (platform.cuh) and the cc::cp_async* functions (common/cp_async.cuh).
//
// Static shared arrays.  `__shared__` is `static` here, so a plain
// `__shared__ float s[64];` would hold the previous block's values when the
// next block starts: a kernel reading shared memory it never wrote would pass.
// CUPYCONV_STATIC_SHARED(T, name, dims) declares the array plus a per-
// declaration epoch; the first thread of a block that reaches the declaration
// fills the array with kPoisonByte (0xCD), as the runtime does with dynamic
// shared memory before every block, and registers it as shared memory of the
// block (a cp.async destination must be shared memory).
//
// cp.async.  Each CUDA thread keeps its copies in flight: cp_async() reads the
// source (zero-filling past src_bytes) and poisons the destination at issue;
// cp_async_commit() closes a group; cp_async_wait_group(n) lands every group
// but the newest n; cp_async_wait_all() lands everything.  A kernel that reads
// a destination before its wait reads 0xCD bytes.  Copies a thread never
// waited for are dropped when the block ends.
#ifndef CUPYCONV_EMU_MEMORY_CUH
#define CUPYCONV_EMU_MEMORY_CUH

namespace cupyconv_emu {
namespace detail {

/// Poison `bytes` at `p` once per block (the first call of the block wins).
inline void poison_static_shared(void* p, std::size_t bytes, std::uint64_t& epoch) {
  Launch* L = t_launch;
  if (L == nullptr || t_thread == nullptr) fail_here("a __shared__ array is declared outside a kernel");
  if (epoch == L->block_serial) return;
  epoch = L->block_serial;
  std::memset(p, kPoisonByte, bytes);
  L->static_shared.emplace_back(static_cast<unsigned char*>(p), bytes);
  // its shared address: after the others, congruent to its host address modulo 1024
  const auto host = static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(p) % 1024u);
  const std::uint32_t addr = L->shared_top + host;
  L->static_shared_addr.push_back(addr);
  L->shared_top = static_cast<std::uint32_t>((addr + bytes + 1023u) / 1024u * 1024u);
}

/// Whether [p, p + n) lies in the running block's shared memory.
inline bool is_shared(const Launch& L, const unsigned char* p, std::size_t n) {
  if (L.dyn_shared != nullptr && p >= L.dyn_shared && p + n <= L.dyn_shared + L.dyn_shared_bytes)
    return true;
  for (const auto& r : L.static_shared) {
    if (p >= r.first && p + n <= r.first + r.second) return true;
  }
  return false;
}

inline std::string cp_async_where() {
  return "cp.async in " + describe_thread(*t_thread);
}

/// cp.async.ca.shared.global [dst], [src], bytes, src_bytes.
inline void cp_async(void* dst, const void* src, int bytes, int src_bytes) {
  if (t_thread == nullptr || t_launch == nullptr) fail_here("cp.async called outside a kernel");
  if (bytes != 4 && bytes != 8 && bytes != 16)
    fail_here(cp_async_where() + ": cp-size " + std::to_string(bytes) + " is not 4, 8 or 16");
  if (src_bytes < 0 || src_bytes > bytes)
    fail_here(cp_async_where() + ": src-size " + std::to_string(src_bytes) +
              " is not in [0, " + std::to_string(bytes) + "]");
  const auto d = reinterpret_cast<std::uintptr_t>(dst), s = reinterpret_cast<std::uintptr_t>(src);
  if (d % bytes != 0 || s % bytes != 0)
    fail_here(cp_async_where() + ": misaligned address (destination " + std::to_string(d % bytes) +
              ", source " + std::to_string(s % bytes) + " bytes past a " + std::to_string(bytes) +
              "-byte boundary)");
  unsigned char* out = static_cast<unsigned char*>(dst);
  if (!is_shared(*t_launch, out, static_cast<std::size_t>(bytes)))
    fail_here(cp_async_where() + ": the destination is not shared memory of this block "
              "(dynamic shared memory, or an array declared with CUPYCONV_STATIC_SHARED)");
  AsyncCopy c;
  c.dst = out;
  c.bytes = bytes;
  if (src_bytes > 0) std::memcpy(c.data, src, static_cast<std::size_t>(src_bytes));
  std::memset(out, kPoisonByte, static_cast<std::size_t>(bytes));  // undefined until the wait
  t_thread->cp_open.push_back(c);
}

/// cp.async.commit_group: the copies issued since the last commit form a group.
inline void cp_async_commit() {
  if (t_thread == nullptr) fail_here("cp.async.commit_group called outside a kernel");
  t_thread->cp_groups.push_back(std::move(t_thread->cp_open));
  t_thread->cp_open.clear();
}

/// cp.async.wait_group n: every group but the newest n has landed.
inline void cp_async_wait_group(int n) {
  if (t_thread == nullptr) fail_here("cp.async.wait_group called outside a kernel");
  auto& groups = t_thread->cp_groups;
  while (groups.size() > static_cast<std::size_t>(n < 0 ? 0 : n)) {
    for (const AsyncCopy& c : groups.front()) std::memcpy(c.dst, c.data, static_cast<std::size_t>(c.bytes));
    groups.pop_front();
  }
}

/// cp.async.wait_all: commit, then wait for every group.
inline void cp_async_wait_all() {
  cp_async_commit();
  cp_async_wait_group(0);
}

}  // namespace detail
}  // namespace cupyconv_emu

#endif  // CUPYCONV_EMU_MEMORY_CUH
