"""CUDA graphs of compiled calls: several programs' steps replayed as one graph launch.

A compiled call (``cupyconv.api.compiled``) whose programs take several device steps
(ndimage's passes, gemm's vol2col and GEMM, Winograd's transforms and batched GEMMs)
replays, with ``cupyconv.config.cuda_graphs``, as one CUDA graph (:class:`GraphedCall`):

- *captured once*, at its first replay, on a private stream, over buffers the graph owns:
  every allocation of every program (pass buffers, workspaces), staging copies of the
  call's arrays that a library step reads, and what the library steps allocate while
  capturing (from a memory pool of its own).  All of it is counted in
  :attr:`GraphedCall.device_bytes`, which ``config.compiled_call_bytes`` bounds.
- *re-pointed per call*.  A buffer that only kernel launches touch (the call's arrays,
  the result of an all-kernel program) has its pointers set per call in the launches'
  graph nodes (``cuGraphExecKernelNodeSetParams``, ctypes on the driver's ``libcuda``,
  which every GPU machine has; ``cuda-bindings`` would reach the same entry point through
  one more dependency, so it is not used): no data moves.  A buffer a library step touches (cuBLAS, an array-module step: their
  graph nodes' parameters are not ours to rewrite) is an owned buffer, filled by one
  device-to-device copy before the launch (an input) or copied out after it (the
  result).  So the ndimage passes and Winograd's input move nothing; gemm copies its
  weights in and its result out.
- *ordered*: one replay at a time per graph (its owned buffers are shared); a replay on
  another stream than the last one's waits for the last one's event.

A capture that fails (cuBLAS refusing to run while the stream captures, a node that
cannot be matched to its launch, no ``libcuda``), or a driver error while replaying,
leaves the call on its plain replay for good, and :attr:`GraphedCall.reason` says why.
cuBLAS: the programs call it as on the plain path (``runner.matmul`` on the capturing
stream, its temporaries from the graph's private pool).  CuPy's ``cublas.setStream``,
which each of its cuBLAS wrappers calls first, raises ``NotImplementedError`` on a
capturing stream (``cupy_backends/cuda/libs/cublas.pyx``, CuPy 13 and 14.2), so today a
program with a GEMM (gemm, Winograd) is not graphed and its reason says so; capturing it
would take calling ``libcublas`` directly (a handle of our own, ``cublasSetStream`` and
``cublasSetWorkspace`` with an owned workspace, so cuBLAS allocates nothing while
capturing).  The capture/driver API is an object
(:class:`CupyGraphs` on CuPy); the tests run the same logic on the emulated runner
against a stand-in of it (:func:`use_api`).
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import threading

import numpy as np

from ..._kernels import program
from ..._kernels.addressing import data_pointer
from ..._kernels.program import Launch
from .prebuilt_launch import dim3

__all__ = ["GraphedCall", "graphed", "use_api", "api_for", "CupyGraphs", "device_steps",
           "graphs_off_reason", "kernel_arguments"]

#: a stand-in of the capture/driver API installed by :func:`use_api` (tests), else None.
_API = [None]


@contextlib.contextmanager
def use_api(api):
    """Capture and launch graphs through ``api`` inside the ``with`` block (a stand-in of
    :class:`CupyGraphs` with the same methods, for the emulated runner's NumPy arrays)."""
    saved = _API[0]
    _API[0] = api
    try:
        yield api
    finally:
        _API[0] = saved


def api_for(xp):
    """The capture/driver API for arrays of ``xp``: the stand-in in force, else
    :class:`CupyGraphs` on CuPy (``None`` on NumPy, or where ``libcuda`` is missing)."""
    if _API[0] is not None:
        return _API[0]
    if xp is np:
        return None
    return CupyGraphs.shared()


def device_steps(programs):
    """The device steps of ``programs``: launches and library calls, a host program as one."""
    return sum(1 if p.host is not None else len(p.steps) for p in programs)


def graphed(steps, result, xp, arrays):
    """A :class:`GraphedCall` of a compiled call's ``steps`` (``(program, binding)``, as
    :attr:`cupyconv.api.compiled.CompiledCall.steps`) and ``result``, or ``None`` when it
    would not pay or cannot be graphed: one device step, or no capture API for ``xp``.
    ``arrays``: the first call's arrays (their extents size the staging buffers)."""
    api = api_for(xp)
    if api is None or device_steps([p for p, _ in steps]) < 2:
        return None
    call = GraphedCall(steps, result, xp, api, arrays)
    if any(type(s) is program.Check for p, _ in steps for s in p.steps):
        call.reason = ("a one-flag data scan reads its flag back mid-call (a synchronisation "
                       "that a captured graph cannot hold)")
    return call


@dataclasses.dataclass
class _Node:
    """A kernel node whose pointers change per call: its launch and, per slot, where the
    pointer comes from: ``("fixed", ptr)``, ``("arg", i, offset)`` or ``("res", offset)``."""

    node: object
    launch: Launch
    slots: tuple


class GraphedCall:
    """The steps of one compiled call as one CUDA graph (see the module docstring)."""

    def __init__(self, steps, result, xp, api, arrays):
        self.steps, self.result, self.xp, self.api = steps, result, xp, api
        self._lock = threading.Lock()
        self._graph = None
        #: why the call replays without a graph (``None`` while it may graph).
        self.reason = None
        self.captures = 0
        self._counted = False
        self._origins = [self._origins_of(k) for k in range(len(steps))]
        self._copied_args = sorted(i for i in range(len(arrays)) if not self._pointer_only(("arg", i)))
        self._copied_result = not self._pointer_only(("res",))
        self._extents = {i: program.extent(arrays[i]) for i in self._copied_args}
        self._planned = sum(int(np.prod(shape)) * np.dtype(dtype).itemsize
                            for p, _ in steps for _, shape, dtype in p.allocations)
        self._planned += sum(hi - lo for lo, hi in filter(None, self._extents.values()))
        self._pool_bytes = 0

    # ------------------------------------------------------------ what points where
    def _origins_of(self, k):
        """``name -> buffer`` of program ``k``: ``("arg", i, offset)`` (the call's
        ``i``-th array), ``("res", offset)`` (the result allocation) or ``None`` (owned or
        constant: fixed in the graph)."""
        prog, binding = self.steps[k]
        rstep, rname = self.result[0], self.result[1]
        out = {}
        for name, src in binding:
            if src[0] == "arg":
                out[name] = ("arg", src[1], src[3])
            elif src[0] == "prev" and (src[1], src[2]) == (rstep, rname):
                out[name] = ("res", src[3])
            else:
                out[name] = None
        if k == rstep:
            out[rname] = ("res", 0)
        return out

    def _pointer_only(self, buffer):
        """Whether only kernel launches touch ``buffer`` (``("arg", i)`` or ``("res",)``),
        so its pointers can be set in their nodes per call."""
        for k, (prog, _) in enumerate(self.steps):
            names = [n for n, o in self._origins[k].items() if o is not None
                     and o[:len(buffer)] == buffer]
            if not names:
                continue
            if prog.host is not None:
                return False
            outputs = {c.output for c in prog.calls}
            if any(n in prog.whole_operands or n in outputs for n in names):
                return False
        return True

    @property
    def device_bytes(self):
        """Bytes the graph owns: its programs' allocations, the staging copies and, once
        captured, what its library steps allocated while capturing; 0 once it gave up."""
        if self.reason is not None:
            return 0
        return self._planned + self._pool_bytes

    def recount(self):
        """True once after a capture, or giving up, changed :attr:`device_bytes` (the cache
        then recounts the entry)."""
        if (self._graph is not None or self.reason is not None) and not self._counted:
            self._counted = True
            return True
        return False

    # ------------------------------------------------------------ capture
    def _capture(self, arrays):
        xp, api = self.xp, self.api
        owned = {}
        bases = {}
        for i, a in enumerate(arrays):
            if i in self._copied_args and self._extents[i] is not None:
                lo, hi = self._extents[i]
                stage = xp.empty(hi - lo, np.uint8)
                owned[("stage", i)] = stage
                bases[i] = program.view_of(xp, stage, data_pointer(a) - lo,
                                           (a.shape, a.strides, a.dtype))
            else:
                bases[i] = a
        captured = [dataclasses.replace(prog, steps=tuple(
            dataclasses.replace(s, function=api.kernel(s.function)) if type(s) is Launch
            else dataclasses.replace(s, function=api.library(s.function))
            for s in prog.steps), host=None if prog.host is None else api.library(prog.host))
            for prog, _ in self.steps]
        bounds, specs = [], []

        def run():                    # bound as it goes: a host step's result comes late
            for k, (_, binding) in enumerate(self.steps):
                bound = self._bind(k, binding, bases, bounds, owned)
                bounds.append(bound)
                specs.append(self._slot_specs(k, bound))
                program.execute(captured[k], xp, bound)
        graph, pool_bytes = api.capture(run)
        nodes = self._match(graph)
        dirty = [_Node(node, launch, spec) for node, launch, spec in zip(
            nodes, [s for p, _ in self.steps for s in p.launches],
            [sp for per in specs for sp in per])
            if any(s[0] != "fixed" for s in spec)]
        rstep, rname, _ = self.result
        res = bounds[rstep][rname]
        if self._copied_result and not res.flags.c_contiguous:
            raise RuntimeError("the result a library step writes is not contiguous")
        self._pool_bytes = int(pool_bytes)
        # kept alive with the graph: their addresses are baked into its nodes
        self._graph = (graph, dirty, owned, bounds, res)
        self.captures += 1

    def _bind(self, k, binding, bases, bounds, owned):
        """Program ``k``'s arrays in the graph: the call's (or their staging copies), the
        earlier programs', constants, and its own allocations (owned)."""
        xp, bound = self.xp, {}
        for name, src in binding:
            if src[0] == "const":
                bound[name] = src[1]
                continue
            base = bases[src[1]] if src[0] == "arg" else bounds[src[1]][src[2]]
            bound[name] = program.placed(xp, base, src[3], src[4])
        for name, shape, dtype in self.steps[k][0].allocations:
            if name not in bound:
                bound[name] = owned[(k, name)] = xp.empty(shape, dtype)
        bound.update(self.steps[k][0].constants)
        return bound

    def _slot_specs(self, k, bound):
        """Per launch of program ``k``: where each of its pointers comes from."""
        prog, origins = self.steps[k][0], self._origins[k]
        out = []
        for launch in prog.launches:
            spec = []
            for s in launch.slots:
                name, extra = (s, 0) if type(s) is str else (s.name, s.offset)
                o = origins.get(name)
                if o is not None and o[0] == "arg" and o[1] not in self._copied_args:
                    spec.append(("arg", o[1], o[2] + extra))
                elif o is not None and o[0] == "res" and not self._copied_result:
                    spec.append(("res", o[1] + extra))
                else:
                    a = bound.get(name)
                    spec.append(("fixed", 0 if a is None else data_pointer(a) + extra))
            out.append(tuple(spec))
        return out

    def _match(self, graph):
        """The graph's kernel node of each of our launches, in order: the ``i``-th launch of
        a kernel is the ``i``-th node of that kernel in the graph's topological order
        (library steps add nodes of their own kernels, which stay as captured)."""
        ours = [s for p, _ in self.steps for s in p.launches]
        by_function = {}
        for node, fptr in self.api.kernel_nodes(graph):
            by_function.setdefault(fptr, []).append(node)
        nodes, taken = [], {}
        for launch in ours:
            fptr = self.api.function_ptr(launch.function)
            i = taken.get(fptr, 0)
            found = by_function.get(fptr, [])
            if i >= len(found):
                raise RuntimeError(f"the graph has {len(found)} nodes of a kernel the "
                                   f"programs launch more often")
            nodes.append(found[i])
            taken[fptr] = i + 1
        extra = sum(len(v) - taken.get(f, 0) for f, v in by_function.items()
                    if f in taken)
        if extra:
            raise RuntimeError(f"the graph has {extra} more nodes of the programs' kernels "
                               f"than the programs launch")
        return nodes

    # ------------------------------------------------------------ replay
    def replay(self, arrays):
        """The result of this call as one graph launch, or ``None`` (not graphed: the caller
        replays the programs one by one; :attr:`reason` says why)."""
        if self.reason is not None:
            return None
        with self._lock:
            if self._graph is None:
                try:
                    self._capture(arrays)
                except Exception as exc:  # noqa: BLE001 - any failure: the plain replay
                    self.reason = f"capture failed: {type(exc).__name__}: {exc}"
                    return None
            try:
                return self._launch(arrays)
            except MemoryError:               # the result: the caller's normal path
                raise
            except Exception as exc:  # noqa: BLE001 - a driver error: the plain replay
                self.reason = f"replay failed: {type(exc).__name__}: {exc}"
                self._graph = None            # its buffers go
                return None

    def _launch(self, arrays):
        xp, api = self.xp, self.api
        graph, dirty, owned, _, res = self._graph
        rstep, rname, view = self.result
        prog = self.steps[rstep][0]
        if self._copied_result:
            shape, dtype = res.shape, res.dtype
        else:
            shape, dtype = next((s, d) for n, s, d in prog.allocations if n == rname)
        y = program.allocate(xp, shape, dtype)
        stream = api.stream()
        api.follow(self, stream)
        for i in self._copied_args:
            extent = self._extents[i]
            if extent is not None:
                api.copy(data_pointer(owned[("stage", i)]), program.extent(arrays[i])[0],
                         extent[1] - extent[0], stream)
        if dirty:
            yptr = data_pointer(y)
            ptrs = [data_pointer(a) for a in arrays]
            for d in dirty:
                api.set_pointers(graph, d.node, d.launch, [
                    s[1] if s[0] == "fixed" else
                    (ptrs[s[1]] + s[2] if s[0] == "arg" else yptr + s[1]) for s in d.slots])
        program.count("graphs")
        api.launch(graph, stream)
        if self._copied_result:
            api.copy(data_pointer(y), data_pointer(res), int(res.nbytes), stream)
        api.record(self, stream)
        return y if view is None else program.view_of(xp, y, view[0], view[1:])


# ---------------------------------------------------------------- CuPy and the driver
class _KernelNodeParams(ctypes.Structure):
    """``CUDA_KERNEL_NODE_PARAMS`` (the v1 layout, which the v1 entry points read)."""

    _fields_ = [("func", ctypes.c_void_p),
                ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint),
                ("gridDimZ", ctypes.c_uint), ("blockDimX", ctypes.c_uint),
                ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint),
                ("kernelParams", ctypes.c_void_p), ("extra", ctypes.c_void_p),
                ("_v2", ctypes.c_void_p * 2)]          # kern, ctx of the v2 layout: room


_KERNEL_NODE = 0                                       # CU_GRAPH_NODE_TYPE_KERNEL


@dataclasses.dataclass(frozen=True)
class _Captured:
    """A graph CuPy captured: its ``cupy.cuda.graph.Graph``, the driver's ``CUgraph`` and
    ``CUgraphExec`` handles, and what must live as long as it (its pool, its stream)."""

    cupy_graph: object
    graph: int
    graphExec: int  # noqa: N815 - CuPy's attribute name
    keep: tuple


class CupyGraphs:
    """The capture/driver API on CuPy: stream capture through CuPy (``Stream.begin_capture``
    on a private non-blocking stream, the library steps' allocations from a private
    ``MemoryPool``), the kernel nodes and their parameter updates through the driver API
    by ctypes on ``libcuda`` (``cuGraphGetNodes``, ``cuGraphGetEdges``,
    ``cuGraphKernelNodeGetParams``, ``cuGraphExecKernelNodeSetParams``: the v1 entry
    points, which every driver since CUDA 10 exports), copies by ``cudaMemcpyAsync``."""

    _shared = None
    _lock = threading.Lock()

    def __init__(self, cupy, libcuda):
        self.cp, self.cu = cupy, libcuda
        for name in ("cuGraphGetNodes", "cuGraphGetEdges", "cuGraphNodeGetType",
                     "cuGraphKernelNodeGetParams", "cuGraphExecKernelNodeSetParams"):
            getattr(libcuda, name).restype = ctypes.c_int

    @classmethod
    def shared(cls):
        """The process's instance, or ``None`` where CuPy or ``libcuda`` cannot be loaded or
        CuPy's graph lacks the driver handles (:func:`graphs_off_reason`)."""
        with cls._lock:
            if cls._shared is None:
                try:
                    import cupy  # optional dependency: the arrays are CuPy's
                    off = graphs_off_reason(cupy)
                    cls._shared = False if off else cls(cupy, ctypes.CDLL("libcuda.so.1"))
                except (ImportError, OSError, AttributeError):
                    cls._shared = False
            return cls._shared or None

    def _check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what} failed with CUresult {status}")

    # capture --------------------------------------------------------------
    def kernel(self, function):
        """A launch's function as captured: a CuPy kernel launches onto the capturing stream."""
        return function

    library = kernel

    def capture(self, run):
        """``(graph, bytes its private pool holds)`` of ``run()`` captured on a private stream."""
        cp = self.cp
        pool = cp.cuda.MemoryPool()
        stream = cp.cuda.Stream(non_blocking=True)
        graph = None
        with cp.cuda.using_allocator(pool.malloc), stream:
            stream.begin_capture()
            try:
                run()
            finally:
                graph = stream.end_capture()
        # CuPy's Graph takes no attributes: the handle keeps the pool and stream alive
        return _Captured(graph, int(graph.graph), int(graph.graphExec), (pool, stream)), \
            pool.total_bytes()

    def kernel_nodes(self, graph):
        """``(node, CUfunction)`` of the graph's kernel nodes in topological order."""
        cu, g = self.cu, ctypes.c_void_p(graph.graph)
        n = ctypes.c_size_t(0)
        self._check(cu.cuGraphGetNodes(g, None, ctypes.byref(n)), "cuGraphGetNodes")
        nodes = (ctypes.c_void_p * max(n.value, 1))()
        self._check(cu.cuGraphGetNodes(g, nodes, ctypes.byref(n)), "cuGraphGetNodes")
        e = ctypes.c_size_t(0)
        self._check(cu.cuGraphGetEdges(g, None, None, ctypes.byref(e)), "cuGraphGetEdges")
        src, dst = (ctypes.c_void_p * max(e.value, 1))(), (ctypes.c_void_p * max(e.value, 1))()
        self._check(cu.cuGraphGetEdges(g, src, dst, ctypes.byref(e)), "cuGraphGetEdges")
        order = _topological([nodes[i] for i in range(n.value)],
                             [(src[i], dst[i]) for i in range(e.value)])
        out = []
        for node in order:
            kind = ctypes.c_int(-1)
            self._check(cu.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind)),
                        "cuGraphNodeGetType")
            if kind.value != _KERNEL_NODE:
                continue
            p = _KernelNodeParams()
            self._check(cu.cuGraphKernelNodeGetParams(ctypes.c_void_p(node), ctypes.byref(p)),
                        "cuGraphKernelNodeGetParams")
            out.append((node, p.func))
        return out

    @staticmethod
    def function_ptr(function):
        """The ``CUfunction`` of a launch's function (a ``RawKernel``, a prebuilt launch, or
        a kernel with bound structs whose ``kernel`` is one)."""
        prebuilt = getattr(function, "_fptr", None)
        if prebuilt is not None:
            return prebuilt
        kernel = function.kernel
        return kernel.ptr if hasattr(kernel, "ptr") else kernel.kernel.ptr

    # per call -------------------------------------------------------------
    def set_pointers(self, graph, node, launch, pointers):
        """Point ``node`` of the instantiated graph at ``pointers`` (its launch's slots),
        its parameters packed as the kernel's signature takes them
        (:func:`kernel_arguments`: every struct, then the pointers)."""
        argv, _keep = kernel_arguments(launch, pointers)
        grid, block = dim3(launch.grid), dim3(launch.block)
        p = _KernelNodeParams(self.function_ptr(launch.function), *grid, *block,
                              int(launch.shared_mem), argv.ctypes.data, None)
        self._check(self.cu.cuGraphExecKernelNodeSetParams(
            ctypes.c_void_p(graph.graphExec), ctypes.c_void_p(node), ctypes.byref(p)),
            "cuGraphExecKernelNodeSetParams")        # copies the parameters: argv is free

    def stream(self):
        return self.cp.cuda.get_current_stream()

    def copy(self, dst, src, nbytes, stream):
        self.cp.cuda.runtime.memcpyAsync(dst, src, nbytes, 3, stream.ptr)  # device to device

    def launch(self, graph, stream):
        graph.cupy_graph.launch(stream)

    def follow(self, owner, stream):
        """Order this replay after the graph's last one, if that ran on another stream."""
        last = getattr(owner, "_last", None)
        if last is not None and last[0] != stream.ptr:
            stream.wait_event(last[1])

    def record(self, owner, stream):
        event = self.cp.cuda.Event(disable_timing=True)
        event.record(stream)
        owner._last = (stream.ptr, event)                  # noqa: SLF001 - the graph's own


def graphs_off_reason(cupy=None) -> str:
    """Why ``config.cuda_graphs`` cannot engage with this CuPy (``""`` when it can): the
    node updates need the ``cudaGraph_t``/``cudaGraphExec_t`` handles of a captured
    ``cupy.cuda.Graph`` (its ``graph``/``graphExec`` attributes, CuPy 14), which CuPy 13
    does not expose; or no CuPy."""
    if cupy is None:
        try:
            import cupy  # optional dependency
        except ImportError:
            return "CuPy is not installed"
    graph = getattr(getattr(cupy, "cuda", None), "Graph", None)
    if graph is None or not all(hasattr(graph, a) for a in ("graph", "graphExec")):
        return (f"CuPy {getattr(cupy, '__version__', '?')}'s cupy.cuda.Graph does not expose "
                "the cudaGraph_t handles (graph, graphExec; CuPy 14 does): compiled calls "
                "replay without graphs")
    return ""


def kernel_arguments(launch, pointers):
    """``(argv, buffers)``: the ``void*`` argument array of ``launch`` with ``pointers`` in
    its slots, following the kernel's signature: ``launch.params``, then each struct the
    function binds after it (``function.structs``: the Winograd transforms' piece), then
    one pointer per slot; ``buffers`` own the bytes ``argv`` points at (keep them alive
    until the driver has copied them)."""
    structs = [np.array(launch.params)] + [np.array(s) for s in
                                           getattr(launch.function, "structs", ())]
    slots = np.array(pointers, dtype=np.uint64)
    argv = np.zeros(len(structs) + len(pointers), np.uint64)
    argv[:len(structs)] = [s.ctypes.data for s in structs]
    argv[len(structs):] = slots.ctypes.data + 8 * np.arange(len(pointers), dtype=np.uint64)
    return argv, (structs, slots)


def _topological(nodes, edges):
    """``nodes`` in a topological order of ``edges`` (ties in the given order)."""
    preds = {n: 0 for n in nodes}
    succ = {n: [] for n in nodes}
    for a, b in edges:
        preds[b] += 1
        succ[a].append(b)
    ready = [n for n in nodes if not preds[n]]
    out = []
    while ready:
        n = ready.pop(0)
        out.append(n)
        for m in succ[n]:
            preds[m] -= 1
            if not preds[m]:
                ready.append(m)
    return out
