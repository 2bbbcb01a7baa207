// Fiber backends for the emulation layer: a pool of guarded stacks and a
// minimal "start / resume / yield / abandon" interface implemented with
// boost.context fibers or glibc ucontext (with AddressSanitizer annotations).
// Included by cuda_emu.cuh only.
#ifndef CUPYCONV_EMU_FIBER_CUH
#define CUPYCONV_EMU_FIBER_CUH

namespace cupyconv_emu {
namespace detail {

/// One fiber stack; a PROT_NONE guard page sits just below `base`.
struct Stack {
  char* base;        ///< lowest usable address
  std::size_t size;  ///< usable bytes above base
};

/// Pool of equally sized stacks, reused across blocks and launches.
class StackPool {
 public:
  explicit StackPool(std::size_t size) : size_(round_to_page(size)) {}
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;
  ~StackPool() {
    const std::size_t page = page_size();
    for (const Stack& s : all_) munmap(s.base - page, s.size + page);
  }

  /// Hand out a stack (fresh or recycled); throws std::bad_alloc on failure.
  Stack take() {
    if (free_.empty()) {
      const std::size_t page = page_size();
      void* p = mmap(nullptr, size_ + page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      mprotect(p, page, PROT_NONE);  // overflow faults instead of corrupting
      all_.reserve(all_.size() + 1);
      all_.push_back(Stack{static_cast<char*>(p) + page, size_});
      free_.reserve(all_.capacity());
      return all_.back();
    }
    Stack s = free_.back();
    free_.pop_back();
#if CUPYCONV_EMU_ASAN
    // Frames of abandoned fibers leave poisoned redzones behind.
    __asan_unpoison_memory_region(s.base, s.size);
#endif
    return s;
  }

  /// Return a stack obtained from take(); never allocates.
  void give(Stack s) noexcept { free_.push_back(s); }

  /// Unmap every stack when all are free (the end of a launch).  Each stack costs two
  /// memory mappings (it and its guard page) and every loaded module has its own pool,
  /// so pools kept between launches exhaust vm.max_map_count (65530) once a process has
  /// run about a hundred modules; re-mapping 256 stacks per launch costs well under a
  /// millisecond.
  void release() noexcept {
    if (free_.size() != all_.size()) return;   // a stack still in use: keep them all
    const std::size_t page = page_size();
    for (const Stack& s : all_) munmap(s.base - page, s.size + page);
    all_.clear();
    free_.clear();
  }

 private:
  static std::size_t page_size() { return static_cast<std::size_t>(sysconf(_SC_PAGESIZE)); }
  static std::size_t round_to_page(std::size_t n) {
    const std::size_t page = page_size();
    return (std::max<std::size_t>(n, 4 * page) + page - 1) / page * page;
  }

  std::size_t size_;          ///< usable bytes per stack
  std::vector<Stack> free_;   ///< stacks ready for reuse (capacity >= all_.size())
  std::vector<Stack> all_;    ///< every stack mapped, unmapped on destruction
};

/// Per-OS-thread stack pool.
inline StackPool& stack_pool() {
  static thread_local StackPool pool(CUPYCONV_EMU_STACK_SIZE);
  return pool;
}

/// Fiber body: runs one CUDA thread and returns normally.
using FiberFn = void (*)(void*);

#if CUPYCONV_EMU_USE_BOOST
// ---------------------------------------------------------------------------
// boost.context backend
// ---------------------------------------------------------------------------
inline const char* fiber_backend_name() { return "boost.context"; }

/// boost.context StackAllocator drawing from stack_pool().
struct PooledStackAllocator {
  boost::context::stack_context allocate() {
    const Stack s = stack_pool().take();
    boost::context::stack_context sc;
    sc.size = s.size;
    sc.sp = s.base + s.size;
    return sc;
  }
  void deallocate(boost::context::stack_context& sc) noexcept {
    stack_pool().give(Stack{static_cast<char*>(sc.sp) - sc.size, sc.size});
  }
};

/// Execution context of one CUDA thread.
struct FiberSlot {
  boost::context::fiber self;    ///< the suspended fiber, held by the scheduler
  boost::context::fiber caller;  ///< the scheduler, held by the running fiber
  bool live = false;             ///< started and not yet finished or abandoned
};

/// Create a suspended fiber that will run fn(arg).
inline void fiber_start(FiberSlot& s, FiberFn fn, void* arg) {
  FiberSlot* slot = &s;
  s.self = boost::context::fiber(
      std::allocator_arg, PooledStackAllocator(),
      [slot, fn, arg](boost::context::fiber&& caller) -> boost::context::fiber {
        slot->caller = std::move(caller);
        fn(arg);
        return std::move(slot->caller);
      });
  s.live = true;
}

/// Run the fiber until it yields or finishes; true when it finished.
inline bool fiber_resume(FiberSlot& s) {
  s.self = std::move(s.self).resume();
  if (!s.self) s.live = false;
  return !s.live;
}

/// Called on the fiber: switch back to the scheduler.
inline void fiber_yield(FiberSlot& s) { s.caller = std::move(s.caller).resume(); }

/// Drop a suspended fiber: its stack is unwound (forced_unwind) and recycled.
inline void fiber_abandon(FiberSlot& s) {
  s.self = boost::context::fiber();
  s.live = false;
}

#else
// ---------------------------------------------------------------------------
// glibc ucontext backend (annotated for AddressSanitizer)
// ---------------------------------------------------------------------------
inline const char* fiber_backend_name() { return "ucontext"; }

/// Execution context of one CUDA thread.
struct FiberSlot {
  ucontext_t uc;              ///< saved registers while suspended
  Stack stack{nullptr, 0};    ///< stack the fiber runs on
  FiberFn fn = nullptr;       ///< body to run
  void* arg = nullptr;        ///< argument of fn
  void* asan_fake = nullptr;  ///< ASan fake-stack handle while suspended
  bool live = false;          ///< started and not yet finished or abandoned
  bool finished = false;      ///< fn returned; set on the fiber before its last switch
};

/// Scheduler-side state of the ucontext backend (per OS thread).
struct UcontextMain {
  ucontext_t uc;                         ///< scheduler registers while a fiber runs
  void* asan_fake = nullptr;             ///< ASan fake-stack handle of the scheduler
  const void* stack_bottom = nullptr;    ///< scheduler stack bounds, reported by ASan
  std::size_t stack_size = 0;            ///< size of the scheduler stack
};
inline UcontextMain& ucontext_main() {
  static thread_local UcontextMain m;
  return m;
}

/// Fiber side of a switch to the scheduler; `slot` null for the final one.
inline void switch_to_main(FiberSlot* slot) {
  UcontextMain& m = ucontext_main();
#if CUPYCONV_EMU_ASAN
  __sanitizer_start_switch_fiber(slot ? &slot->asan_fake : nullptr, m.stack_bottom, m.stack_size);
#endif
  if (slot) {
    swapcontext(&slot->uc, &m.uc);
#if CUPYCONV_EMU_ASAN
    __sanitizer_finish_switch_fiber(slot->asan_fake, &m.stack_bottom, &m.stack_size);
#endif
  } else {
    setcontext(&m.uc);
  }
}

inline void ucontext_trampoline(unsigned int hi, unsigned int lo) {
  FiberSlot* s = reinterpret_cast<FiberSlot*>((static_cast<std::uintptr_t>(hi) << 32) |
                                              static_cast<std::uintptr_t>(lo));
#if CUPYCONV_EMU_ASAN
  UcontextMain& m = ucontext_main();
  __sanitizer_finish_switch_fiber(nullptr, &m.stack_bottom, &m.stack_size);
#endif
  s->fn(s->arg);
  s->finished = true;
  switch_to_main(nullptr);
  std::abort();  // unreachable: a finished fiber is never resumed
}

/// Create a suspended fiber that will run fn(arg).
inline void fiber_start(FiberSlot& s, FiberFn fn, void* arg) {
  s.stack = stack_pool().take();
  s.fn = fn;
  s.arg = arg;
  s.finished = false;
  getcontext(&s.uc);
  s.uc.uc_stack.ss_sp = s.stack.base;
  s.uc.uc_stack.ss_size = s.stack.size;
  s.uc.uc_link = nullptr;
  const std::uintptr_t p = reinterpret_cast<std::uintptr_t>(&s);
  makecontext(&s.uc, reinterpret_cast<void (*)()>(&ucontext_trampoline), 2,
              static_cast<unsigned int>(p >> 32), static_cast<unsigned int>(p & 0xffffffffu));
  s.live = true;
}

/// Run the fiber until it yields or finishes; true when it finished.
inline bool fiber_resume(FiberSlot& s) {
  UcontextMain& m = ucontext_main();
#if CUPYCONV_EMU_ASAN
  __sanitizer_start_switch_fiber(&m.asan_fake, s.stack.base, s.stack.size);
#endif
  swapcontext(&m.uc, &s.uc);
#if CUPYCONV_EMU_ASAN
  __sanitizer_finish_switch_fiber(m.asan_fake, nullptr, nullptr);
#endif
  if (s.finished) {
    stack_pool().give(s.stack);
    s.live = false;
  }
  return !s.live;
}

/// Called on the fiber: switch back to the scheduler.
inline void fiber_yield(FiberSlot& s) { switch_to_main(&s); }

/// Drop a suspended fiber without running it again; its stack is recycled.
inline void fiber_abandon(FiberSlot& s) {
  stack_pool().give(s.stack);
  s.live = false;
}
#endif

}  // namespace detail
}  // namespace cupyconv_emu

#endif  // CUPYCONV_EMU_FIBER_CUH
