// mbarriers of the emulation layer (init, arrive, expect-tx, complete-tx, try_wait.parity)
// for the producer-consumer pipelines of the warpgroup-MMA kernels.  Included by
// cuda_emu.cuh after emu_wgmma.cuh (whose per-block state keeps the barriers); kernels use
// common/wgmma.cuh.
//
// A barrier is the uint64 at a shared address; its state (phase, arrivals pending in the
// phase, transaction bytes) is kept aside per block, keyed by that address, and using one
// that no mbarrier.init set up in the block is an error.  A phase completes when its last
// arrival is in and its transaction count is back to zero (the count may dip below zero
// until the expect-tx arrives, within +-(2^20 - 1)).  try_wait.parity that finds the phase
// not complete yields to the other threads; when only such polls run and no barrier
// changes, the launch fails with "deadlock: ... polls an mbarrier ... whose phase never
// completes".
#ifndef CUPYCONV_EMU_MBARRIER_CUH
#define CUPYCONV_EMU_MBARRIER_CUH

namespace cupyconv_emu {
namespace detail {

// ---------------------------------------------------------------------------
// mbarrier
// ---------------------------------------------------------------------------

inline Mbarrier& mbarrier_at(const void* bar, const char* what, bool init = false) {
  if (t_thread == nullptr || t_launch == nullptr) fail_here(std::string(what) + " called outside a kernel");
  if (reinterpret_cast<std::uintptr_t>(bar) % 8 != 0)
    fail_here(describe_thread(*t_thread) + ": " + what + " on an mbarrier that is not 8-byte aligned");
  const std::uint32_t addr = shared_address(bar, what);
  WgmmaBlock& b = wgmma_block();
  for (auto& e : b.bars)
    if (e.first == addr) return e.second;
  if (!init) {
    fail_here(describe_thread(*t_thread) + ": " + what + " on shared address " +
              std::to_string(addr) + ", where no mbarrier.init ran in this block");
  }
  b.bars.emplace_back(addr, Mbarrier{});
  return b.bars.back().second;
}

inline void mbarrier_check_tx(const Mbarrier& m, const char* what) {
  if (m.tx > (1 << 20) - 1 || m.tx < -((1 << 20) - 1))
    fail_here(describe_thread(*t_thread) + ": " + what + " takes the mbarrier's transaction count "
              "out of [-(2^20 - 1), 2^20 - 1]");
}

inline void mbarrier_complete_phase(Mbarrier& m) {
  if (m.pending == 0 && m.tx == 0) {
    m.phase += 1;
    m.pending = m.expected;
  }
  t_launch->spin_progress = true;
}

inline void mbarrier_init(void* bar, unsigned count) {
  if (count == 0 || count > (1u << 20) - 1)
    fail_here(describe_thread(*t_thread) + ": mbarrier.init count must be in [1, 2^20 - 1]");
  Mbarrier& m = mbarrier_at(bar, "mbarrier.init", true);
  m = Mbarrier{count, count, 0, 0};
  std::memset(bar, 0, 8);
  t_launch->spin_progress = true;
}

/// mbarrier.arrive(.expect_tx): returns the state token (the phase it arrived on).
inline std::uint64_t mbarrier_arrive(void* bar, unsigned expect_tx) {
  Mbarrier& m = mbarrier_at(bar, "mbarrier.arrive");
  if (m.pending == 0) fail_here(describe_thread(*t_thread) + ": mbarrier.arrive on a phase with no arrival left");
  const std::uint64_t token = m.phase;
  m.tx += expect_tx;
  mbarrier_check_tx(m, "mbarrier.arrive.expect_tx");
  m.pending -= 1;
  mbarrier_complete_phase(m);
  return token;
}

inline void mbarrier_expect_tx(void* bar, unsigned bytes) {
  Mbarrier& m = mbarrier_at(bar, "mbarrier.expect_tx");
  m.tx += bytes;
  mbarrier_check_tx(m, "mbarrier.expect_tx");
}

inline void mbarrier_complete_tx(void* bar, unsigned bytes) {
  Mbarrier& m = mbarrier_at(bar, "mbarrier.complete_tx");
  m.tx -= bytes;  // may go below zero until the expect-tx arrives (the ISA's range is +-(2^20 - 1))
  mbarrier_check_tx(m, "mbarrier.complete_tx");
  mbarrier_complete_phase(m);
}

/// mbarrier.try_wait.parity: whether the phase of parity `parity` completed; when not, the
/// thread yields (a polling loop lets the others run; a phase that never completes is a
/// deadlock error naming the call site).
inline bool mbarrier_try_wait_parity(Site site, void* bar, unsigned parity) {
  Mbarrier& m = mbarrier_at(bar, "mbarrier.try_wait.parity");
  if ((m.phase & 1u) != (parity & 1u)) return true;
  ThreadCtx* t = t_thread;
  t->spinning = true;
  t->site = site;
  fiber_yield(t->fiber);
  return false;
}

}  // namespace detail
}  // namespace cupyconv_emu

#endif  // CUPYCONV_EMU_MBARRIER_CUH
