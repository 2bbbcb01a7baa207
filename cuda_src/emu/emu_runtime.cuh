// Launch runtime of the emulation layer: per-thread state, the block
// scheduler that resolves barriers and warp collectives, and launch_kernel().
// Included by cuda_emu.cuh only.
#ifndef CUPYCONV_EMU_RUNTIME_CUH
#define CUPYCONV_EMU_RUNTIME_CUH

namespace cupyconv_emu {
namespace detail {

/// Scheduling state of one CUDA thread.
enum class Wait : unsigned char {
  kRunnable,  // ready to run (or running)
  kBlock,     // waiting at a block-wide barrier
  kWarp,      // waiting at a warp collective
  kGroup,     // waiting at a warpgroup collective (wgmma.mma_async: 4 aligned warps)
  kDone,      // kernel returned
  kFailed,    // reported an error; never resumed
};

/// Collective operation a thread waits in.
enum class Op : unsigned char {
  kSyncthreads, kSyncthreadsCount, kSyncthreadsAnd, kSyncthreadsOr,
  kSyncwarp, kShfl, kBallot, kAny, kAll,
  kReduceAdd, kReduceMinU, kReduceMaxU, kReduceMinI, kReduceMaxI,
};

inline const char* op_name(Op op) {
  static const char* const names[] = {
      "__syncthreads()", "__syncthreads_count()", "__syncthreads_and()", "__syncthreads_or()",
      "__syncwarp()", "__shfl*_sync()", "__ballot_sync()", "__any_sync()", "__all_sync()",
      "__reduce_add_sync()", "__reduce_min_sync()", "__reduce_max_sync()",
      "__reduce_min_sync()", "__reduce_max_sync()"};
  return names[static_cast<int>(op)];
}

/// Source location of a collective call.
struct Site {
  const char* file;  ///< __FILE__ at the call
  int line;          ///< __LINE__ at the call
};

inline bool same_site(const Site& a, const Site& b) {
  return a.line == b.line && std::strcmp(a.file, b.file) == 0;
}

/// One emulated cp.async copy in flight: the source bytes (read at issue, zero-filled
/// past src-size) land in `dst` only at cp.async.wait_group / wait_all.
struct AsyncCopy {
  unsigned char* dst = nullptr;  ///< shared-memory destination
  int bytes = 0;                 ///< cp-size: 4, 8 or 16
  unsigned char data[16] = {};   ///< what lands
};

/// State of one CUDA thread of the running block.
struct ThreadCtx {
  uint3 thread_idx{0, 0, 0};  ///< threadIdx
  unsigned tid = 0;            ///< linear index x + y*bx + z*bx*by
  Wait wait = Wait::kRunnable; ///< scheduling state
  Op op = Op::kSyncthreads;    ///< pending collective (valid while kBlock / kWarp)
  Site site{"", 0};            ///< call site of the pending collective
  unsigned mask = 0;           ///< participant mask of a pending warp collective
  int src_lane = -1;           ///< shuffle source lane in the warp, -1 = own value
  std::uint64_t value = 0;     ///< value contributed to the pending collective
  std::uint64_t result = 0;    ///< collective result, valid once released
  FiberSlot fiber;             ///< execution context
  std::vector<AsyncCopy> cp_open;             ///< cp.async copies not yet committed
  std::deque<std::vector<AsyncCopy>> cp_groups;  ///< committed groups, oldest first
  std::uint64_t group_count = 0;  ///< warpgroup collectives this thread executed in the block
  int group_kind = 0;             ///< the pending warpgroup collective's instruction
  bool spinning = false;          ///< yielded in a polling wait (mbarrier.try_wait) that failed
};

/// State of one kernel launch.
struct Launch {
  dim3 grid_dim;                    ///< gridDim
  dim3 block_dim;                   ///< blockDim
  uint3 block_idx{0, 0, 0};         ///< blockIdx of the running block
  unsigned nthreads = 0;            ///< threads per block
  bool reverse = false;             ///< reverse schedule (last thread / block first)
  ThreadCtx* threads = nullptr;     ///< nthreads contexts, reused for every block
  unsigned char* dyn_shared = nullptr;  ///< dynamic shared memory of the running block
  std::size_t dyn_shared_bytes = 0;     ///< its size in bytes
  std::uint64_t block_serial = 0;       ///< unique per block of any launch (poisoning epoch)
  /// CUPYCONV_STATIC_SHARED arrays the running block has declared (address, bytes).
  std::vector<std::pair<unsigned char*, std::size_t>> static_shared;
  /// Emulated shared state-space address of each static_shared array, and of the dynamic
  /// shared memory: its address is congruent to its host address modulo 1024 (so aligning
  /// a generic pointer aligns its shared address, as on the GPU); arrays follow it.
  std::vector<std::uint32_t> static_shared_addr;
  std::uint32_t dyn_shared_addr = 0;   ///< shared address of dyn_shared[0]
  std::uint32_t shared_top = 0;        ///< first free shared address (1024-aligned)
  bool spin_progress = false;          ///< an mbarrier changed during this scheduler round
  FiberFn body = nullptr;           ///< runs the kernel for the current thread
  void* body_arg = nullptr;         ///< argument of body
  std::string error;                ///< first error; non-empty aborts the launch
};

/// Byte that fills shared memory a block has not written (dynamic shared memory,
/// CUPYCONV_STATIC_SHARED arrays, pending cp.async targets): 0xCDCDCDCD reads as
/// -4.3e8f, 0xCDCDCDCDCDCDCDCD as -6.3e66 (double) or a huge negative integer.
constexpr unsigned char kPoisonByte = 0xCD;

inline std::atomic<std::uint64_t> g_block_serial{0};  // last block serial handed out

inline thread_local Launch* t_launch = nullptr;     // launch running on this OS thread
inline thread_local ThreadCtx* t_thread = nullptr;  // CUDA thread whose fiber runs now
inline thread_local std::string t_last_error;       // message of the last failed launch

inline const uint3& cur_thread_idx() { return t_thread->thread_idx; }
inline const uint3& cur_block_idx() { return t_launch->block_idx; }
inline const dim3& cur_block_dim() { return t_launch->block_dim; }
inline const dim3& cur_grid_dim() { return t_launch->grid_dim; }
inline unsigned char* dynamic_shared() { return t_launch->dyn_shared; }

inline std::string fmt3(unsigned x, unsigned y, unsigned z) {
  return "(" + std::to_string(x) + "," + std::to_string(y) + "," + std::to_string(z) + ")";
}
inline std::string describe_thread(const ThreadCtx& t) {
  return "thread " + fmt3(t.thread_idx.x, t.thread_idx.y, t.thread_idx.z);
}
inline std::string describe_site(const ThreadCtx& t) {
  return std::string(op_name(t.op)) + " at " + t.site.file + ":" + std::to_string(t.site.line);
}
inline std::string describe_state(const ThreadCtx& t) {
  switch (t.wait) {
    case Wait::kDone: return "has exited";
    case Wait::kFailed: return "has failed";
    case Wait::kRunnable: return "is running";
    case Wait::kGroup:
      return "waits in a warpgroup collective at " + std::string(t.site.file) + ":" +
             std::to_string(t.site.line);
    default: return "waits in " + describe_site(t);
  }
}
inline std::string hex(unsigned v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

/// Record the first error of the launch.
inline void set_error(Launch& L, const std::string& msg) {
  if (L.error.empty()) L.error = msg;
}

/// Called on a fiber: report an error and never continue this thread.
[[noreturn]] inline void fail_here(const std::string& msg) {
  ThreadCtx* t = t_thread;
  if (t == nullptr || t_launch == nullptr) {
    std::fprintf(stderr, "cupyconv emulation: %s (outside a launch)\n", msg.c_str());
    std::abort();
  }
  set_error(*t_launch, msg);
  t->wait = Wait::kFailed;
  fiber_yield(t->fiber);  // boost: abandoned with forced_unwind; ucontext: never resumed
  std::abort();
}

/// Defined by emu_wgmma.cuh: fails a thread that returns with wgmma operations in flight.
inline void wgmma_check_exit(ThreadCtx& t);

/// Called on a fiber: wait in a collective and return its result.
inline std::uint64_t collective(Wait wait, Op op, Site site, unsigned mask, int src_lane,
                                std::uint64_t value) {
  ThreadCtx* t = t_thread;
  if (t == nullptr) fail_here(std::string(op_name(op)) + " called outside a kernel");
  t->wait = wait;
  t->op = op;
  t->site = site;
  t->mask = mask;
  t->src_lane = src_lane;
  t->value = value;
  fiber_yield(t->fiber);
  return t->result;
}

/// Entry of every fiber: run the kernel for t_thread, catching exceptions.
inline void thread_entry(void* p) {
  ThreadCtx* t = static_cast<ThreadCtx*>(p);
  Launch* L = t_launch;
  try {
    L->body(L->body_arg);
    wgmma_check_exit(*t);
    t->wait = Wait::kDone;
#if CUPYCONV_EMU_USE_BOOST
  } catch (const boost::context::detail::forced_unwind&) {
    throw;  // an abandoned fiber unwinds: let boost finish it
#endif
  } catch (const std::exception& e) {
    set_error(*L, describe_thread(*t) + " threw " + e.what());
    t->wait = Wait::kFailed;
  } catch (...) {
    set_error(*L, describe_thread(*t) + " threw an unknown exception");
    t->wait = Wait::kFailed;
  }
}

/// Result of a collective over the lanes in `m` of the warp starting at `base`.
inline void complete_warp_op(Launch& L, unsigned base, unsigned m, Op op) {
  ThreadCtx* w = L.threads + base;
  std::uint64_t acc = 0;
  bool first = true;
  for (unsigned l = 0; l < 32; ++l) {
    if (!((m >> l) & 1u)) continue;
    const std::uint64_t v = w[l].value;
    switch (op) {
      case Op::kBallot: acc |= (v ? 1ull : 0ull) << l; break;
      case Op::kAny: acc = acc || v; break;
      case Op::kAll: acc = (first || acc) && v; break;
      case Op::kReduceAdd: acc = static_cast<std::uint32_t>(acc + v); break;
      case Op::kReduceMinU: acc = first ? v : std::min<std::uint64_t>(acc, v); break;
      case Op::kReduceMaxU: acc = first ? v : std::max<std::uint64_t>(acc, v); break;
      case Op::kReduceMinI:
        acc = first ? v : static_cast<std::uint64_t>(std::min<std::int64_t>(
                              static_cast<std::int64_t>(acc), static_cast<std::int64_t>(v)));
        break;
      case Op::kReduceMaxI:
        acc = first ? v : static_cast<std::uint64_t>(std::max<std::int64_t>(
                              static_cast<std::int64_t>(acc), static_cast<std::int64_t>(v)));
        break;
      default: break;
    }
    first = false;
  }
  for (unsigned l = 0; l < 32; ++l) {
    if (!((m >> l) & 1u)) continue;
    ThreadCtx& t = w[l];
    if (op == Op::kShfl) {
      const int s = t.src_lane;
      t.result = (s >= 0 && s < 32 && ((m >> s) & 1u)) ? w[s].value : t.value;
    } else {
      t.result = acc;
    }
    t.wait = Wait::kRunnable;
  }
}

/// Release every warp collective whose participants have all arrived.
/// Returns true if any thread was released.
inline bool release_warps(Launch& L) {
  bool progress = false;
  for (unsigned base = 0; base < L.nthreads; base += 32) {
    const unsigned count = std::min(32u, L.nthreads - base);
    const unsigned exist = count == 32 ? 0xffffffffu : ((1u << count) - 1u);
    ThreadCtx* w = L.threads + base;
    for (unsigned l = 0; l < count; ++l) {
      const ThreadCtx& t = w[l];
      if (t.wait != Wait::kWarp) continue;
      const unsigned m = t.mask & exist;
      bool ready = true;
      for (unsigned j = 0; j < count && ready; ++j) {
        if (!((m >> j) & 1u)) continue;
        const ThreadCtx& u = w[j];
        if (u.wait == Wait::kDone || u.wait == Wait::kFailed) {
          set_error(L, describe_thread(t) + " waits in " + describe_site(t) + " with mask " +
                           hex(t.mask) + ", but lane " + std::to_string(j) + " (" +
                           describe_thread(u) + ") has exited");
          return false;
        }
        ready = u.wait == Wait::kWarp && u.op == t.op && u.mask == t.mask;
      }
      if (ready) {
        complete_warp_op(L, base, m, t.op);
        progress = true;
      }
    }
  }
  return progress;
}

/// Release every warpgroup collective (128 threads, warps 4k .. 4k + 3) whose threads have
/// all arrived at the same instruction; the instruction checks the details on its own.
/// Returns true if any thread was released; sets L.error when one of them has exited.
inline bool release_warpgroups(Launch& L) {
  bool progress = false;
  for (unsigned base = 0; base + 128 <= L.nthreads; base += 128) {
    ThreadCtx* g = L.threads + base;
    const ThreadCtx* waiting = nullptr;
    bool ready = true;
    for (unsigned i = 0; i < 128; ++i) {
      if (g[i].wait == Wait::kGroup) {
        if (waiting == nullptr) waiting = &g[i];
      } else {
        ready = false;
      }
    }
    if (waiting == nullptr) continue;
    if (ready) {
      for (unsigned i = 0; i < 128; ++i) g[i].wait = Wait::kRunnable;
      progress = true;
      continue;
    }
    for (unsigned i = 0; i < 128; ++i) {
      if (g[i].wait == Wait::kDone || g[i].wait == Wait::kFailed) {
        set_error(L, describe_thread(*waiting) + " waits in the warpgroup collective at " +
                         waiting->site.file + ":" + std::to_string(waiting->site.line) +
                         ", but " + describe_thread(g[i]) + " of its warpgroup (threads " +
                         std::to_string(base) + ".." + std::to_string(base + 127) +
                         ") has exited: wgmma needs all 128 threads");
        return false;
      }
    }
  }
  return progress;
}

/// Release a block-wide barrier once every live thread waits at it.
/// Returns true if threads were released; sets L.error on divergence.
inline bool release_block_barrier(Launch& L) {
  const ThreadCtx* first = nullptr;
  const ThreadCtx* exited = nullptr;
  unsigned n_exited = 0;
  for (unsigned i = 0; i < L.nthreads; ++i) {
    const ThreadCtx& t = L.threads[i];
    if (t.wait == Wait::kDone) {
      if (!exited) exited = &t;
      ++n_exited;
    } else if (t.wait == Wait::kBlock) {
      if (!first) {
        first = &t;
      } else if (t.op != first->op || !same_site(t.site, first->site)) {
        set_error(L, "divergent barrier: " + describe_thread(*first) + " waits in " +
                         describe_site(*first) + ", " + describe_thread(t) + " waits in " +
                         describe_site(t));
        return false;
      }
    } else {
      return false;  // some thread waits in a warp collective
    }
  }
  if (!first) return false;
  if (exited) {
    set_error(L, "barrier never completes: " + describe_thread(*first) + " waits in " +
                     describe_site(*first) + ", but " + std::to_string(n_exited) + " of " +
                     std::to_string(L.nthreads) + " threads have exited (first: " +
                     describe_thread(*exited) + ")");
    return false;
  }
  std::uint64_t count = 0;
  for (unsigned i = 0; i < L.nthreads; ++i) count += L.threads[i].value ? 1 : 0;
  std::uint64_t result = 0;
  switch (first->op) {
    case Op::kSyncthreadsCount: result = count; break;
    case Op::kSyncthreadsAnd: result = count == L.nthreads; break;
    case Op::kSyncthreadsOr: result = count != 0; break;
    default: break;
  }
  for (unsigned i = 0; i < L.nthreads; ++i) {
    L.threads[i].result = result;
    L.threads[i].wait = Wait::kRunnable;
  }
  return true;
}

/// Explain why no thread can make progress.
inline std::string describe_deadlock(const Launch& L) {
  for (unsigned i = 0; i < L.nthreads; ++i) {
    const ThreadCtx& t = L.threads[i];
    if (t.wait != Wait::kGroup) continue;
    const unsigned base = i / 128 * 128;
    for (unsigned j = base; j < base + 128; ++j) {
      const ThreadCtx& u = L.threads[j];
      if (u.wait != Wait::kGroup) {
        return "deadlock: " + describe_thread(t) + " waits in the warpgroup collective at " +
               t.site.file + ":" + std::to_string(t.site.line) + ", but " + describe_thread(u) +
               " of its warpgroup " + describe_state(u);
      }
    }
  }
  for (unsigned i = 0; i < L.nthreads; ++i) {
    const ThreadCtx& t = L.threads[i];
    if (t.wait != Wait::kWarp) continue;
    const unsigned base = i / 32 * 32;
    for (unsigned j = 0; j < 32 && base + j < L.nthreads; ++j) {
      const ThreadCtx& u = L.threads[base + j];
      if (((t.mask >> j) & 1u) && !(u.wait == Wait::kWarp && u.op == t.op && u.mask == t.mask)) {
        return "deadlock: " + describe_thread(t) + " waits in " + describe_site(t) +
               " with mask " + hex(t.mask) + ", but lane " + std::to_string(j) + " (" +
               describe_thread(u) + ") " + describe_state(u) +
               (u.wait == Wait::kWarp ? " with mask " + hex(u.mask) : std::string());
      }
    }
  }
  return "deadlock: no thread can make progress";
}

/// Abandon every fiber still alive (after an error).
inline void abandon_all(Launch& L) {
  for (unsigned i = 0; i < L.nthreads; ++i) {
    if (L.threads[i].fiber.live) fiber_abandon(L.threads[i].fiber);
  }
}

/// Run the current block (L.block_idx) to completion; false on error.
inline bool run_block(Launch& L) {
  const unsigned n = L.nthreads;
  for (unsigned i = 0; i < n; ++i) {
    ThreadCtx& t = L.threads[i];
    t.wait = Wait::kRunnable;
    t.result = 0;
    t.cp_open.clear();    // copies a thread of the previous block never waited for are dropped
    t.cp_groups.clear();
    t.group_count = 0;    // warpgroup collectives are counted per block
    fiber_start(t.fiber, &thread_entry, &t);
  }
  int stalled_rounds = 0;  // rounds in which only failed polling waits ran
  for (;;) {
    bool advanced = false, spinning = false;
    L.spin_progress = false;
    for (unsigned k = 0; k < n; ++k) {
      ThreadCtx& t = L.threads[L.reverse ? n - 1 - k : k];
      if (t.wait != Wait::kRunnable) continue;
      t.spinning = false;
      t_thread = &t;
      fiber_resume(t.fiber);
      t_thread = nullptr;
      if (!L.error.empty()) {
        abandon_all(L);
        return false;
      }
      if (t.wait == Wait::kRunnable && t.spinning) {
        spinning = true;
      } else {
        advanced = true;
      }
    }
    bool all_done = true;
    for (unsigned i = 0; i < n && all_done; ++i) all_done = L.threads[i].wait == Wait::kDone;
    if (all_done) return true;
    bool released = release_warps(L);
    if (!released && L.error.empty()) released = release_warpgroups(L);
    if (!released && L.error.empty()) released = release_block_barrier(L);
    if (!released && L.error.empty()) {
      if (!spinning) {
        set_error(L, describe_deadlock(L));
      } else if (advanced || L.spin_progress) {
        stalled_rounds = 0;
      } else if (++stalled_rounds > 2) {
        for (unsigned i = 0; i < n; ++i) {
          const ThreadCtx& t = L.threads[i];
          if (t.wait == Wait::kRunnable && t.spinning) {
            set_error(L, "deadlock: " + describe_thread(t) + " polls an mbarrier at " +
                             t.site.file + ":" + std::to_string(t.site.line) +
                             " whose phase never completes (no thread left can arrive on it or "
                             "complete its transactions)");
            break;
          }
        }
      }
    }
    if (!L.error.empty()) {
      abandon_all(L);
      return false;
    }
  }
}

/// Validate launch dimensions; empty string when valid.
inline std::string check_config(dim3 grid, dim3 block, std::size_t shmem, int schedule) {
  if (block.x == 0 || block.y == 0 || block.z == 0) return "block dimensions must be positive";
  if (block.x > 1024 || block.y > 1024 || block.z > 64)
    return "block dimensions exceed (1024, 1024, 64)";
  if (static_cast<unsigned long long>(block.x) * block.y * block.z > 1024)
    return "more than 1024 threads per block";
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return "grid dimensions must be positive";
  if (grid.x > 2147483647u || grid.y > 65535u || grid.z > 65535u)
    return "grid dimensions exceed (2147483647, 65535, 65535)";
  if (shmem > 232448) return "dynamic shared memory exceeds 227 KiB";
  if (schedule != 0 && schedule != 1) return "schedule must be 0 (forward) or 1 (reverse)";
  return std::string();
}

/// run_launch without releasing the fiber stacks.
inline int run_launch_pooled(dim3 grid, dim3 block, std::size_t shmem, int schedule,
                             FiberFn body, void* body_arg) {
  t_last_error.clear();
  const std::string bad = check_config(grid, block, shmem, schedule);
  if (!bad.empty()) {
    t_last_error = "invalid launch configuration: " + bad;
    return 1;
  }
  if (t_launch != nullptr) {
    t_last_error = "nested kernel launch";
    return 1;
  }
  try {
    Launch L;
    L.grid_dim = grid;
    L.block_dim = block;
    L.nthreads = block.x * block.y * block.z;
    L.reverse = schedule == 1;
    L.body = body;
    L.body_arg = body_arg;
    std::vector<ThreadCtx> threads(L.nthreads);
    for (unsigned i = 0; i < L.nthreads; ++i) {
      threads[i].tid = i;
      threads[i].thread_idx = uint3{i % block.x, (i / block.x) % block.y, i / (block.x * block.y)};
    }
    L.threads = threads.data();
    // Exact-size heap buffer so AddressSanitizer sees overruns.
    std::unique_ptr<unsigned char[]> smem(new unsigned char[shmem]);
    L.dyn_shared = smem.get();
    L.dyn_shared_bytes = shmem;
    // 1 KiB at shared address 0 is left out (sm_90 reserves it), then the dynamic window.
    L.dyn_shared_addr = 1024u + static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(L.dyn_shared) % 1024u);
    const unsigned long long nblocks = static_cast<unsigned long long>(grid.x) * grid.y * grid.z;
    t_launch = &L;
    bool ok = true;
    for (unsigned long long k = 0; k < nblocks && ok; ++k) {
      const unsigned long long b = L.reverse ? nblocks - 1 - k : k;
      L.block_idx = uint3{static_cast<unsigned>(b % grid.x),
                          static_cast<unsigned>((b / grid.x) % grid.y),
                          static_cast<unsigned>(b / (static_cast<unsigned long long>(grid.x) * grid.y))};
      std::memset(L.dyn_shared, kPoisonByte, shmem);  // garbage: uninitialized reads show up
      L.block_serial = ++g_block_serial;  // CUPYCONV_STATIC_SHARED arrays: poisoned at first use
      L.static_shared.clear();
      L.static_shared_addr.clear();
      L.shared_top = static_cast<std::uint32_t>((L.dyn_shared_addr + shmem + 1023u) / 1024u * 1024u);
      ok = run_block(L);
    }
    t_launch = nullptr;
    if (!ok) {
      t_last_error = "block " + fmt3(L.block_idx.x, L.block_idx.y, L.block_idx.z) + ": " + L.error;
      return 2;
    }
    return 0;
  } catch (const std::exception& e) {
    t_launch = nullptr;
    t_last_error = std::string("emulator failure: ") + e.what();
    return 2;
  }
}

/// Run a type-erased kernel body over the whole grid; 0 on success, 1 for
/// an invalid configuration, 2 for a runtime error (see t_last_error).  The fibers'
/// stacks are unmapped afterwards (StackPool::release: the launch's threads, and with
/// them every stack, are gone by then).
inline int run_launch(dim3 grid, dim3 block, std::size_t shmem, int schedule, FiberFn body,
                      void* body_arg) {
  const int rc = run_launch_pooled(grid, block, shmem, schedule, body, body_arg);
  stack_pool().release();
  return rc;
}

/// Calls a kernel with arguments unpacked from a cuLaunchKernel-style array.
template <class... A>
struct KernelCall {
  void (*kernel)(A...);  ///< the kernel
  void** args;           ///< args[i] points to the value of parameter i

  template <std::size_t... I>
  void call(std::index_sequence<I...>) const {
    kernel(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(args[I])...);
  }
  static void invoke(void* self) {
    static_cast<const KernelCall*>(self)->call(std::index_sequence_for<A...>{});
  }
};

}  // namespace detail

/// Launch `kern` like cuLaunchKernel: args[i] points to the i-th argument.
/// schedule 0 runs threads and blocks in ascending order, 1 in descending
/// order.  Returns 0 on success; otherwise emu_last_error() explains.
template <class... A>
int launch_kernel(void (*kern)(A...), dim3 grid, dim3 block, std::size_t shmem, void** args,
                  int schedule) {
  detail::KernelCall<A...> call{kern, args};
  return detail::run_launch(grid, block, shmem, schedule, &detail::KernelCall<A...>::invoke,
                            &call);
}

/// Number of kernel parameters.
template <class... A>
int kernel_num_args(void (*)(A...)) {
  return static_cast<int>(sizeof...(A));
}

/// Size in bytes of parameter i and whether it is a pointer; -1 if out of range.
template <class... A>
long long kernel_arg_info(void (*)(A...), int i, int* is_pointer) {
  static const std::size_t sizes[] = {sizeof(A)..., 0};
  static const int pointers[] = {std::is_pointer<std::remove_cv_t<A>>::value..., 0};
  if (i < 0 || i >= static_cast<int>(sizeof...(A))) return -1;
  *is_pointer = pointers[i];
  return static_cast<long long>(sizes[i]);
}

/// Message of the last failed launch on this OS thread.
inline const char* last_error() { return detail::t_last_error.c_str(); }

/// Name of the fiber backend compiled in ("boost.context" or "ucontext").
inline const char* backend_name() { return detail::fiber_backend_name(); }

}  // namespace cupyconv_emu

#endif  // CUPYCONV_EMU_RUNTIME_CUH
