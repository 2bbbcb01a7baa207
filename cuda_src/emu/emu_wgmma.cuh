// Hopper warpgroup MMA of the emulation layer: wgmma.mma_async (f16 / bf16 m64nNk16 and
// tf32 m64nNk8 with f32 accumulation, shared-memory descriptors or A in registers),
// wgmma.fence, commit_group, wait_group and fence.proxy.async (the mbarriers of a
// producer-consumer pipeline: emu_mbarrier.cuh).  Included by cuda_emu.cuh only; kernels
// use common/wgmma.cuh.  docs/emulation.md, "Warpgroup MMA", says the same in prose.
//
// Shared addresses.  The descriptors carry shared state-space addresses (18 bits, 16-byte
// units), and the swizzle works on those absolute addresses, so the emulator gives the
// block's shared memory addresses: 1 KiB left free at 0, then the dynamic shared memory at
// an address congruent to its host address modulo 1024, then the CUPYCONV_STATIC_SHARED
// arrays in the order the block declares them (each congruent to its host address modulo
// 1024).  Aligning a generic pointer to 1024 bytes therefore aligns its shared address, as
// on the GPU.  shared_address() maps a pointer to its address, shared_pointer() back.
//
// Descriptors (PTX ISA, "Matrix Descriptor Format"): bits 0-13 start address >> 4, 16-29
// leading dimension byte offset (LBO) >> 4, 32-45 stride dimension byte offset (SBO) >> 4,
// 49-51 base offset, 62-63 swizzle (0 none, 1 128 B, 2 64 B, 3 32 B).  With s bytes per
// element, T = 16 / s elements per 16-byte chunk and W = 2, 4, 8 chunks per swizzle row
// (32, 64, 128 B), element (r, k) of a K-major matrix (r along M or N) is at
//   none:      start + 16 (r % 8) + SBO (r / 8) + LBO (k / T) + s (k % T)
//   swizzled:  start + 16 W (r % 8) + SBO (r / 8) + 16 (k / T) + s (k % T)
// and element (r, k) of an M/N-major one (transpose bit set; f16 and bf16 only) at
//   none:      start + SBO (r / T) + 16 (k % 8) + LBO (k / 8) + s (r % T)
//   swizzled:  start + 16 ((r / T) % W) + LBO (r / T / W) + 16 W (k % 8) + SBO (k / 8) + s (r % T)
// (the canonical layouts of the ISA's "Shared Memory Matrix Layout", as CUTLASS's
// make_gmma_desc states them).  A swizzled address a then has its 16-byte chunk bits
// [4, 4 + B) XORed with its row bits [7, 7 + B) counted from the pattern's start:
// a ^= (((a >> 7) - base offset) & (2^B - 1)) << 4, B = 3, 2, 1 for 128, 64, 32 B.
// Checked: the base offset is below 2^B and equals the pattern row of the start address
// (bits [7, 7 + B)), which is 0 for a tile aligned to its pattern (1024, 512, 256 bytes);
// every byte read lies in the block's shared memory.
//
// Register fragments (PTX ISA, "Register Fragments" of wgmma .m64nNk16 / .m64nNk8), for
// thread x of the warpgroup, warp w = x / 32, g = (x % 32) / 4, t = x % 4:
//   D (f32), register i < N / 2:  row 16 w + g + 8 ((i >> 1) & 1), column 8 (i / 4) + 2 t + (i & 1)
//   A f16/bf16 (RS), half i < 8:  row 16 w + g + 8 ((i >> 1) & 1), column 2 t + (i & 1) + 8 (i >> 2)
//                                 (register i / 2, the low 16 bits for even i)
//   A tf32 (RS), register i < 4:  row 16 w + g + 8 (i & 1), column t + 4 (i >> 1)
//
// Asynchrony.  wgmma.mma_async is a collective of the 128 threads of an aligned warpgroup
// (a block whose threads do not fill it, an exited thread or threads at different call
// sites are an error).  It needs a wgmma.fence by the thread since its last
// wgmma.wait_group (or the start of the kernel).  At the issue the operands are checked
// (descriptor, alignment, shared-memory bounds), each thread records the operation, keeps
// the accumulators' value aside and fills its accumulator registers with a NaN
// (kAccPoison); the shared-memory bytes it will read must equal what the async proxy saw
// at the last fence.proxy.async of the block (a generic-proxy write -- a store or a landed
// cp.async -- with no fence after it is an error), and their digest is kept.  commit_group
// closes the thread's open operations into a group; wait_group N completes every group but
// the newest N, in issue order: the shared memory is read then (a digest that differs from
// the issue's is an error: the operands were overwritten before the wait), the products
// are computed and the accumulators written back (registers the kernel wrote meanwhile are
// an error).  Operations never waited for are an error when the thread returns.
//
// Arithmetic.  Products of f16, bf16 and tf32 operands are exact in float; each
// instruction adds its K products and C with the multi-term adder measured for mma.sync on
// an H200 (mma_f32_accumulate of emu_mma.cuh).  How the wgmma hardware orders and rounds
// the sum is not documented and not measured here: compare with a tolerance.  tf32
// operands are read with their low 13 bits ignored (what the tensor core reads).
//
// fence.proxy.async keeps a copy of the block's shared memory as the async proxy sees it
// (taken by any thread's fence: a fence by another thread of the block than the writer is
// accepted, which the ISA does not promise).
#ifndef CUPYCONV_EMU_WGMMA_CUH
#define CUPYCONV_EMU_WGMMA_CUH

namespace cupyconv_emu {
namespace detail {

/// What an accumulator register holds between a wgmma's issue and its wait.
constexpr std::uint32_t kAccPoison = 0x7fc0cdcdu;

/// Element types of wgmma.mma_async.
enum class WgmmaType : int { kF16 = 1, kBF16 = 2, kTF32 = 3 };

inline const char* wgmma_type_name(WgmmaType t) {
  return t == WgmmaType::kF16 ? "f16" : t == WgmmaType::kBF16 ? "bf16" : "tf32";
}

// ---------------------------------------------------------------------------
// Shared addresses
// ---------------------------------------------------------------------------

/// Shared state-space address of `p`, or fails when it is not shared memory of the block.
inline std::uint32_t shared_address(const void* p, const char* what) {
  Launch* L = t_launch;
  if (L == nullptr || t_thread == nullptr) fail_here(std::string(what) + " called outside a kernel");
  const auto* c = static_cast<const unsigned char*>(p);
  if (L->dyn_shared != nullptr && c >= L->dyn_shared && c < L->dyn_shared + L->dyn_shared_bytes)
    return L->dyn_shared_addr + static_cast<std::uint32_t>(c - L->dyn_shared);
  for (std::size_t i = 0; i < L->static_shared.size(); ++i) {
    const auto& r = L->static_shared[i];
    if (c >= r.first && c < r.first + r.second)
      return L->static_shared_addr[i] + static_cast<std::uint32_t>(c - r.first);
  }
  fail_here(describe_thread(*t_thread) + ": " + what +
            " takes a pointer to shared memory of this block (dynamic shared memory or a "
            "CUPYCONV_STATIC_SHARED array)");
}

/// Host pointer of `bytes` at shared address `addr`, or nullptr when not all of it is shared
/// memory of the block.
inline unsigned char* shared_pointer(std::uint32_t addr, std::size_t bytes) {
  Launch* L = t_launch;
  if (L->dyn_shared != nullptr && addr >= L->dyn_shared_addr &&
      addr + bytes <= L->dyn_shared_addr + L->dyn_shared_bytes)
    return L->dyn_shared + (addr - L->dyn_shared_addr);
  for (std::size_t i = 0; i < L->static_shared.size(); ++i) {
    const std::uint32_t a = L->static_shared_addr[i];
    if (addr >= a && addr + bytes <= a + L->static_shared[i].second)
      return L->static_shared[i].first + (addr - a);
  }
  return nullptr;
}

// ---------------------------------------------------------------------------
// Per-block state: the async proxy's view of shared memory, mbarriers
// ---------------------------------------------------------------------------

struct Mbarrier {
  std::uint32_t expected = 0;   ///< arrivals per phase (init count)
  std::uint32_t pending = 0;    ///< arrivals still missing in the current phase
  std::int64_t tx = 0;          ///< transaction bytes expected and not completed
  std::uint32_t phase = 0;      ///< phases completed
};

struct WgmmaBlock {
  std::uint64_t block_serial = 0;
  bool fenced = false;                        ///< a fence.proxy.async ran in this block
  std::vector<unsigned char> dyn_view;        ///< dynamic shared memory at the last fence
  std::vector<std::vector<unsigned char>> static_view;  ///< the static arrays at the last fence
  std::vector<std::pair<std::uint32_t, Mbarrier>> bars;  ///< by shared address
};

inline thread_local WgmmaBlock t_wgmma_block;

inline WgmmaBlock& wgmma_block() {
  WgmmaBlock& b = t_wgmma_block;
  if (b.block_serial != t_launch->block_serial) {
    b = WgmmaBlock{};
    b.block_serial = t_launch->block_serial;
  }
  return b;
}

/// fence.proxy.async.shared::cta: the async proxy now sees the block's shared memory.
inline void fence_proxy_async() {
  if (t_thread == nullptr || t_launch == nullptr) fail_here("fence.proxy.async called outside a kernel");
  Launch& L = *t_launch;
  WgmmaBlock& b = wgmma_block();
  b.dyn_view.assign(L.dyn_shared, L.dyn_shared + L.dyn_shared_bytes);
  b.static_view.resize(L.static_shared.size());
  for (std::size_t i = 0; i < L.static_shared.size(); ++i)
    b.static_view[i].assign(L.static_shared[i].first, L.static_shared[i].first + L.static_shared[i].second);
  b.fenced = true;
}

/// The byte at shared address `addr` as the async proxy saw it at the last fence (-1: the
/// array was declared after it).
inline int async_view(const WgmmaBlock& b, std::uint32_t addr) {
  const Launch& L = *t_launch;
  if (addr >= L.dyn_shared_addr && addr < L.dyn_shared_addr + L.dyn_shared_bytes)
    return b.dyn_view[addr - L.dyn_shared_addr];
  for (std::size_t i = 0; i < L.static_shared.size(); ++i) {
    const std::uint32_t a = L.static_shared_addr[i];
    if (addr >= a && addr < a + L.static_shared[i].second)
      return i < b.static_view.size() ? b.static_view[i][addr - a] : -1;
  }
  return -1;
}

// ---------------------------------------------------------------------------
// Descriptors
// ---------------------------------------------------------------------------

struct WgmmaDesc {
  std::uint64_t raw = 0;
  std::uint32_t start = 0, lbo = 0, sbo = 0, base = 0;
  int swizzle = 0;    ///< descriptor field: 0 none, 1 128 B, 2 64 B, 3 32 B
  int bits = 0;       ///< B: 3, 2, 1 (0 without swizzle)
  int width = 1;      ///< W: 16-byte chunks per swizzle row (1 without swizzle)
};

inline const char* swizzle_name(int mode) {
  static const char* const names[] = {"no swizzle", "128-byte swizzle", "64-byte swizzle",
                                      "32-byte swizzle"};
  return names[mode & 3];
}

inline WgmmaDesc decode_desc(std::uint64_t raw) {
  WgmmaDesc d;
  d.raw = raw;
  d.start = static_cast<std::uint32_t>(raw & 0x3fffu) << 4;
  d.lbo = static_cast<std::uint32_t>((raw >> 16) & 0x3fffu) << 4;
  d.sbo = static_cast<std::uint32_t>((raw >> 32) & 0x3fffu) << 4;
  d.base = static_cast<std::uint32_t>((raw >> 49) & 0x7u);
  d.swizzle = static_cast<int>(raw >> 62);
  d.bits = d.swizzle == 1 ? 3 : d.swizzle == 2 ? 2 : d.swizzle == 3 ? 1 : 0;
  d.width = 1 << d.bits;
  return d;
}

inline std::string desc_text(const WgmmaDesc& d) {
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "descriptor 0x%016llx (start 0x%05x, LBO %u, SBO %u, base offset %u, %s)",
                static_cast<unsigned long long>(d.raw), d.start, d.lbo, d.sbo, d.base,
                swizzle_name(d.swizzle));
  return buf;
}

/// Shared address of element (r, k) of a matrix (r along M or N), before the bounds check.
inline std::uint32_t desc_element(const WgmmaDesc& d, int r, int k, bool mn_major, int s) {
  const std::uint32_t T = 16u / static_cast<std::uint32_t>(s), W = static_cast<std::uint32_t>(d.width);
  const auto ur = static_cast<std::uint32_t>(r), uk = static_cast<std::uint32_t>(k);
  std::uint32_t a = d.start;
  if (!mn_major) {
    a += d.bits ? 16u * W * (ur % 8) + d.sbo * (ur / 8) + 16u * (uk / T)
                : 16u * (ur % 8) + d.sbo * (ur / 8) + d.lbo * (uk / T);
    a += static_cast<std::uint32_t>(s) * (uk % T);
  } else {
    const std::uint32_t chunk = ur / T;
    a += d.bits ? 16u * (chunk % W) + d.lbo * (chunk / W) + 16u * W * (uk % 8) + d.sbo * (uk / 8)
                : d.sbo * chunk + 16u * (uk % 8) + d.lbo * (uk / 8);
    a += static_cast<std::uint32_t>(s) * (ur % T);
  }
  if (d.bits) {
    const std::uint32_t mask = (1u << d.bits) - 1u;
    a ^= (((a >> 7) - d.base) & mask) << 4;
  }
  return a & 0x3ffffu;
}

// ---------------------------------------------------------------------------
// Operations and the per-thread queue
// ---------------------------------------------------------------------------

struct WgmmaOp {
  WgmmaType type = WgmmaType::kF16;
  int n = 0;                         ///< N
  bool trans_a = false, trans_b = false, a_regs = false;
  bool scale_d = true;
  WgmmaDesc da, db;
  float a[2][16] = {};               ///< RS: this thread's two A rows (g, g + 8), read at issue
  float* d = nullptr;                ///< the accumulator registers
  Site site{"", 0};
  std::uint64_t digest = 0;          ///< of the shared-memory bytes it reads, at issue
};

struct WgmmaThread {
  std::uint64_t block_serial = 0;
  bool fenced = false;                          ///< wgmma.fence since the last wait
  std::vector<WgmmaOp> open;                    ///< issued, not committed
  std::deque<std::vector<WgmmaOp>> groups;      ///< committed, oldest first
  std::vector<std::pair<float*, std::vector<float>>> acc;  ///< registers in flight: their value
};

/// Staging area of one warpgroup (RS: every thread's A registers).
struct WgmmaGroup {
  std::uint64_t block_serial = 0;
  std::uint32_t a[128][4] = {};
  Site site[128] = {};
  std::uint64_t count[128] = {};
  int kind[128] = {};
};

inline thread_local std::vector<WgmmaThread> t_wgmma_threads;
inline thread_local std::vector<WgmmaGroup> t_wgmma_groups;

inline WgmmaThread& wgmma_thread() {
  Launch& L = *t_launch;
  if (t_wgmma_threads.size() < L.nthreads) t_wgmma_threads.resize(L.nthreads);
  WgmmaThread& w = t_wgmma_threads[t_thread->tid];
  if (w.block_serial != L.block_serial) {
    w = WgmmaThread{};
    w.block_serial = L.block_serial;
  }
  return w;
}

inline std::string wgmma_where(const char* what, Site site) {
  return describe_thread(*t_thread) + ": " + what + " at " + site.file + ":" + std::to_string(site.line);
}

inline int wgmma_elem_bytes(WgmmaType t) { return t == WgmmaType::kTF32 ? 4 : 2; }
inline int wgmma_k(WgmmaType t) { return t == WgmmaType::kTF32 ? 8 : 16; }

/// The float an element of the given type holds (tf32: low 13 bits ignored).
inline float wgmma_value(WgmmaType t, const unsigned char* p) {
  if (t == WgmmaType::kTF32) {
    std::uint32_t u;
    std::memcpy(&u, p, 4);
    return tf32_operand(u);
  }
  unsigned short h;
  std::memcpy(&h, p, 2);
  return t == WgmmaType::kF16 ? half_bits_to_float(h)
                              : bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

/// Visit every (matrix, slot, row, k, shared address) the thread's part of `op` reads from
/// shared memory: its two A rows (SS; slots 0 and 1) and all of B (slot = row).
template <class F>
inline void wgmma_reads(const WgmmaOp& op, F&& f) {
  const int s = wgmma_elem_bytes(op.type), K = wgmma_k(op.type);
  const unsigned x = t_thread->tid % 128u;
  const int rows[2] = {static_cast<int>(16 * (x / 32) + (x % 32) / 4),
                       static_cast<int>(16 * (x / 32) + (x % 32) / 4 + 8)};
  if (!op.a_regs) {
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < K; ++k) f(0, h, rows[h], k, desc_element(op.da, rows[h], k, op.trans_a, s));
  }
  for (int c = 0; c < op.n; ++c)
    for (int k = 0; k < K; ++k) f(1, c, c, k, desc_element(op.db, c, k, op.trans_b, s));
}

inline std::uint64_t fnv(std::uint64_t h, unsigned char v) { return (h ^ v) * 1099511628211ull; }

/// Checks at the issue: descriptors, bounds, the async proxy's view; returns the digest.
inline std::uint64_t wgmma_check_reads(const WgmmaOp& op, const std::string& where) {
  const int s = wgmma_elem_bytes(op.type);
  for (int m = op.a_regs ? 1 : 0; m < 2; ++m) {
    const WgmmaDesc& d = m == 0 ? op.da : op.db;
    const char* name = m == 0 ? "A" : "B";
    if (d.bits && d.base >= (1u << d.bits))
      fail_here(where + ": the " + name + " " + desc_text(d) + " has a base offset above the " +
                std::to_string((1u << d.bits) - 1) + " its swizzle allows");
    if (d.bits && ((d.start >> 7) & ((1u << d.bits) - 1u)) != d.base) {
      fail_here(where + ": the " + name + " " + desc_text(d) + " starts in row " +
                std::to_string((d.start >> 7) & ((1u << d.bits) - 1u)) + " of its " +
                std::to_string(128u << d.bits) + "-byte swizzle pattern but its base "
                "offset says row " + std::to_string(d.base) + ": align the tile to " +
                std::to_string(128u << d.bits) + " bytes or set the base offset");
    }
  }
  WgmmaBlock& b = wgmma_block();
  std::uint64_t h = 1469598103934665603ull;
  wgmma_reads(op, [&](int m, int, int row, int k, std::uint32_t addr) {
    const unsigned char* p = shared_pointer(addr, static_cast<std::size_t>(s));
    const WgmmaDesc& d = m == 0 ? op.da : op.db;
    const char* name = m == 0 ? "A" : "B";
    if (p == nullptr) {
      fail_here(where + ": element (" + std::to_string(row) + ", " + std::to_string(k) + ") of " +
                name + " is at shared address " + std::to_string(addr) + ", outside the block's "
                "shared memory (" + desc_text(d) + ")");
    }
    for (int i = 0; i < s; ++i) {
      const int seen = b.fenced ? async_view(b, addr + static_cast<std::uint32_t>(i)) : -1;
      if (seen != p[i]) {
        fail_here(where + " reads " + name + " element (" + std::to_string(row) + ", " +
                  std::to_string(k) + ") at shared address " + std::to_string(addr) +
                  (b.fenced ? ", written by the generic proxy (a store or a landed cp.async) "
                              "after the last fence.proxy.async"
                            : ", but no fence.proxy.async ran in this block") +
                  ": make shared-memory writes visible to the async proxy with "
                  "cc::fence_proxy_async() (then a barrier) before the wgmma");
      }
      h = fnv(h, p[i]);
    }
  });
  return h;
}

/// Compute one completed operation into the thread's accumulator copy.
inline void wgmma_execute(const WgmmaOp& op, std::vector<float>& acc) {
  const int s = wgmma_elem_bytes(op.type), K = wgmma_k(op.type);
  const int emin = op.type == WgmmaType::kF16 ? -14 : -126;
  float A[2][16], B[256][16];
  std::uint64_t h = 1469598103934665603ull;
  wgmma_reads(op, [&](int m, int slot, int, int k, std::uint32_t addr) {
    const unsigned char* p = shared_pointer(addr, static_cast<std::size_t>(s));
    for (int i = 0; i < s; ++i) h = fnv(h, p[i]);
    (m == 0 ? A[slot] : B[slot])[k] = wgmma_value(op.type, p);
  });
  if (h != op.digest) {
    fail_here(describe_thread(*t_thread) + ": the shared-memory operands of the wgmma.mma_async "
              "issued at " + op.site.file + ":" + std::to_string(op.site.line) + " changed "
              "between its issue and the wgmma.wait_group that completes it: a stage may be "
              "overwritten only after the wait");
  }
  if (op.a_regs) std::memcpy(A, op.a, sizeof(A));
  const unsigned x = t_thread->tid % 128u;
  const int t = static_cast<int>(x % 4);
  for (int i = 0; i < op.n / 2; ++i) {
    const int h2 = (i >> 1) & 1, col = 8 * (i / 4) + 2 * t + (i & 1);
    const float c = op.scale_d ? acc[static_cast<std::size_t>(i)] : 0.0f;
    acc[static_cast<std::size_t>(i)] = mma_f32_accumulate(A[h2], B[col], K, c, emin);
  }
}

/// wgmma.wait_group n for the calling thread.
inline void wgmma_wait_group(Site site, int n) {
  if (t_thread == nullptr || t_launch == nullptr) fail_here("wgmma.wait_group called outside a kernel");
  WgmmaThread& w = wgmma_thread();
  while (w.groups.size() > static_cast<std::size_t>(n < 0 ? 0 : n)) {
    for (const WgmmaOp& op : w.groups.front()) {
      auto it = std::find_if(w.acc.begin(), w.acc.end(), [&](const auto& e) { return e.first == op.d; });
      wgmma_execute(op, it->second);
    }
    w.groups.pop_front();
  }
  // registers no operation in flight refers to any more go back to the thread
  for (auto it = w.acc.begin(); it != w.acc.end();) {
    bool used = false;
    for (const auto& g : w.groups)
      for (const WgmmaOp& op : g) used = used || op.d == it->first;
    for (const WgmmaOp& op : w.open) used = used || op.d == it->first;
    if (used) {
      ++it;
      continue;
    }
    for (std::size_t i = 0; i < it->second.size(); ++i) {
      if (bit_cast<std::uint32_t>(it->first[i]) != kAccPoison) {
        fail_here(wgmma_where("wgmma.wait_group", site) + ": accumulator register " +
                  std::to_string(i) + " was written between the wgmma.mma_async that uses it "
                  "and this wait");
      }
      it->first[i] = it->second[i];
    }
    it = w.acc.erase(it);
  }
  w.fenced = false;
}

inline void wgmma_fence() {
  if (t_thread == nullptr || t_launch == nullptr) fail_here("wgmma.fence called outside a kernel");
  wgmma_thread().fenced = true;
}

inline void wgmma_commit_group() {
  if (t_thread == nullptr || t_launch == nullptr) fail_here("wgmma.commit_group called outside a kernel");
  WgmmaThread& w = wgmma_thread();
  w.groups.push_back(std::move(w.open));
  w.open.clear();
}

inline void wgmma_check_exit(ThreadCtx& t) {
  if (t_launch == nullptr || t.tid >= t_wgmma_threads.size()) return;
  WgmmaThread& w = t_wgmma_threads[t.tid];
  if (w.block_serial != t_launch->block_serial) return;
  std::size_t n = w.open.size();
  for (const auto& g : w.groups) n += g.size();
  if (n != 0) {
    fail_here(describe_thread(t) + " returns with " + std::to_string(n) + " wgmma.mma_async "
              "operation(s) in flight: no wgmma.wait_group completed them (their accumulators "
              "were never written)");
  }
}

/// The warpgroup rendezvous of wgmma.mma_async: every thread of the aligned warpgroup at
/// the same instruction, same call site, same count; `a` staged for the RS form.
inline WgmmaGroup& wgmma_gather(Site site, int kind, const std::uint32_t* a, const std::string& where) {
  ThreadCtx* t = t_thread;
  Launch& L = *t_launch;
  const unsigned base = t->tid / 128u * 128u, x = t->tid % 128u;
  if (base + 128 > L.nthreads) {
    fail_here(where + " in warpgroup " + std::to_string(t->tid / 128u) + ", which has only " +
              std::to_string(L.nthreads - base) + " threads: wgmma is a collective of 128 "
              "threads (four aligned warps; a block of " + std::to_string(L.nthreads) +
              " threads is not a multiple of 128)");
  }
  if (t_wgmma_groups.size() < L.nthreads / 128u) t_wgmma_groups.resize(L.nthreads / 128u);
  WgmmaGroup& g = t_wgmma_groups[t->tid / 128u];
  if (g.block_serial != L.block_serial) {
    g = WgmmaGroup{};
    g.block_serial = L.block_serial;
  }
  t->group_count += 1;
  g.count[x] = t->group_count;
  g.kind[x] = kind;
  g.site[x] = site;
  if (a != nullptr) std::memcpy(g.a[x], a, sizeof(g.a[x]));
  collective(Wait::kGroup, Op::kSyncwarp, site, 0, -1, 0);
  for (unsigned i = 0; i < 128; ++i) {
    if (g.count[i] != g.count[x] || g.kind[i] != kind || !same_site(g.site[i], site)) {
      fail_here("divergent warpgroup: " + where + ", but " + describe_thread(L.threads[base + i]) +
                " of its warpgroup met it at " + g.site[i].file + ":" + std::to_string(g.site[i].line) +
                " (another wgmma instruction or count): all 128 threads must execute the same "
                "wgmma.mma_async");
    }
  }
  return g;
}

/// wgmma.mma_async.sync.aligned.m64n{n}k{16|8}.f32.{type}.{type}: d (n / 2 floats) = A * B + d.
/// `a_regs` (4 registers) is the RS form's A fragment, else `desc_a` describes A.
inline void wgmma_mma(Site site, WgmmaType type, int n, float* d, std::uint64_t desc_a,
                      const std::uint32_t* a_regs, std::uint64_t desc_b, bool trans_a,
                      bool trans_b, int scale_d) {
  if (t_thread == nullptr || t_launch == nullptr) fail_here("wgmma.mma_async called outside a kernel");
  char name[96];
  std::snprintf(name, sizeof(name), "wgmma.mma_async.m64n%dk%d.f32.%s (%s)", n, wgmma_k(type),
                wgmma_type_name(type), a_regs ? "A in registers" : "A in shared memory");
  const std::string where = wgmma_where(name, site);
  if (n < 8 || n > 256 || n % 8 != 0) fail_here(where + ": N must be a multiple of 8 in [8, 256]");
  if (type == WgmmaType::kTF32 && (trans_a || trans_b))
    fail_here(where + ": the transpose bits exist for f16 and bf16 only");
  WgmmaThread& w = wgmma_thread();
  if (!w.fenced) {
    fail_here(where + " without a wgmma.fence since the last wgmma.wait_group: call "
              "cc::wgmma_fence() before the first wgmma.mma_async of each batch");
  }
  const int kind = static_cast<int>(type) * 10000 + n * 4 + (trans_a ? 2 : 0) + (trans_b ? 1 : 0) +
                   (a_regs ? 100000 : 0);
  WgmmaGroup& g = wgmma_gather(site, kind, a_regs, where);
  WgmmaOp op;
  op.type = type;
  op.n = n;
  op.trans_a = trans_a;
  op.trans_b = trans_b;
  op.a_regs = a_regs != nullptr;
  op.scale_d = scale_d != 0;
  op.da = decode_desc(desc_a);
  op.db = decode_desc(desc_b);
  op.d = d;
  op.site = site;
  if (a_regs != nullptr) {  // this thread's A rows g and g + 8 from its warp's registers
    const unsigned x = t_thread->tid % 128u, warp0 = x / 32 * 32, gi = (x % 32) / 4;
    for (unsigned tt = 0; tt < 4; ++tt) {
      const std::uint32_t* r = g.a[warp0 + 4 * gi + tt];
      if (type == WgmmaType::kTF32) {
        for (int i = 0; i < 4; ++i) op.a[i & 1][tt + 4 * (i >> 1)] = tf32_operand(r[i]);
      } else {
        for (int i = 0; i < 8; ++i) {
          const std::uint32_t reg = r[i >> 1];
          const auto h = static_cast<unsigned short>((i & 1) ? (reg >> 16) : (reg & 0xffffu));
          const float v = type == WgmmaType::kF16 ? half_bits_to_float(h)
                                                  : bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
          op.a[(i >> 1) & 1][2 * tt + (i & 1) + 8 * (i >> 2)] = v;
        }
      }
    }
  }
  op.digest = wgmma_check_reads(op, where);
  collective(Wait::kGroup, Op::kSyncwarp, site, 0, -1, 0);  // nobody restages before all read
  // The accumulators: their value is kept aside (unless already in flight) and poisoned.
  auto it = std::find_if(w.acc.begin(), w.acc.end(), [&](const auto& e) { return e.first == d; });
  if (it == w.acc.end()) {
    w.acc.emplace_back(d, std::vector<float>(d, d + n / 2));
  } else if (it->second.size() != static_cast<std::size_t>(n / 2)) {
    fail_here(where + ": its accumulators are in flight in a wgmma of another N");
  }
  for (int i = 0; i < n / 2; ++i) d[i] = bit_cast<float>(kAccPoison);
  w.open.push_back(op);
}

}  // namespace detail
}  // namespace cupyconv_emu

#endif  // CUPYCONV_EMU_WGMMA_CUH
