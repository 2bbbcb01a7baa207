"""Issue 24 part 3: compiled calls replayed as one CUDA graph (``config.cuda_graphs``).

The graph logic (``backends/cuda/graphs.py``) runs here on the emulated runner against a
stand-in of the capture/driver API (:class:`StandInGraphs`): capturing records each
kernel launch as a node without running it, a library step as a node that runs again at
every launch into the buffers it first returned; ``set_pointers`` rewrites a node's
pointers; ``launch`` runs the nodes in order.  So a stale pointer, a missed re-pointing
or a kernel left out of the graph gives a wrong result, and every comparison with the
normal path is ``array_equal`` (the same programs and parameter bytes run).
"""
from __future__ import annotations

import contextlib
import ctypes
import types

import numpy as np
import pytest

import cupyconv
from cupyconv import config, ndimage
from cupyconv._kernels import program
from cupyconv._kernels.addressing import data_pointer
from cupyconv.api import compiled
from cupyconv.api.compiled import CompiledCall, NotCompiled, lookup
from cupyconv.backends.cuda import graphs
from helpers import called_twice, in_threads, small_ints

F32 = np.dtype(np.float32)


def _at(ptr):
    """A NumPy array whose data pointer is ``ptr`` (what a launch reads of its slots)."""
    if not ptr:
        return None
    return np.frombuffer((ctypes.c_char * 1).from_address(ptr), np.uint8)


class _Graph:
    def __init__(self, nodes):
        self.nodes = nodes


class StandInGraphs:
    """A stand-in of :class:`cupyconv.backends.cuda.graphs.CupyGraphs` on NumPy arrays
    (see the module docstring); ``log`` lists what each replay asked of it."""

    def __init__(self, fail=None):
        self.fail, self.graphs, self.log, self._nodes = fail, [], [], None

    def kernel(self, function):
        def captured(grid, block, args, shared_mem=0):
            assert self._nodes is not None, "a captured kernel ran outside the capture"
            self._nodes.append({"kind": "kernel", "function": function, "grid": grid,
                                "block": block, "smem": shared_mem, "params": args[0],
                                "ptrs": [0 if a is None else data_pointer(a)
                                         for a in args[1:]]})
        return captured

    def library(self, function):
        def captured(*inputs):
            if self.fail:
                raise RuntimeError(self.fail)
            value = function(*inputs)
            self._nodes.append({"kind": "library", "function": function, "inputs": inputs,
                                "value": value})
            return value
        return captured

    def capture(self, run):
        self._nodes = []
        try:
            run()
            graph = _Graph(self._nodes)
        finally:
            self._nodes = None
        self.graphs.append(graph)
        return graph, 0

    def kernel_nodes(self, graph):
        return [(n, id(n["function"])) for n in graph.nodes if n["kind"] == "kernel"]

    @staticmethod
    def function_ptr(function):
        return id(function)

    def set_pointers(self, graph, node, launch, pointers):
        assert node["function"] is launch.function and node["grid"] == launch.grid
        node["ptrs"] = list(pointers)
        self.log.append(("set", graph.nodes.index(node), tuple(pointers)))

    def stream(self):
        return "stream"

    def copy(self, dst, src, nbytes, stream):
        ctypes.memmove(dst, src, nbytes)
        self.log.append(("copy", dst, src, nbytes))

    def launch(self, graph, stream):
        self.log.append(("launch", self.graphs.index(graph)))
        for n in graph.nodes:
            if n["kind"] == "kernel":
                n["function"](n["grid"], n["block"], (n["params"], *map(_at, n["ptrs"])),
                              shared_mem=n["smem"])
                continue
            value = n["function"](*n["inputs"])
            if n["value"] is not None and value is not n["value"]:
                n["value"][...] = value               # the same buffer as at capture

    def follow(self, owner, stream):
        self.log.append(("follow",))

    def record(self, owner, stream):
        self.log.append(("record",))


@contextlib.contextmanager
def graphs_on(api):
    saved = config.cuda_graphs
    config.cuda_graphs = True
    try:
        with graphs.use_api(api), cupyconv.use_backend("emulated"):
            yield api
    finally:
        config.cuda_graphs = saved


@contextlib.contextmanager
def normal_path():
    saved = config.compiled_calls
    config.compiled_calls = False
    try:
        with cupyconv.use_backend("emulated"):
            yield
    finally:
        config.compiled_calls = saved


@pytest.fixture
def emulated():
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("the emulated backend is not available here")
    cupyconv.clear_caches()
    yield
    cupyconv.clear_caches()


def _cases(rng):
    """``{name: (call, arrays, entry)}``: multi-step compiled calls of the issue (the kernel
    groups of ``test_compiled_calls``' shapes, already built), ``arrays`` the new data of
    each call, ``entry(arrays)`` its cache entry."""
    v = [rng.standard_normal((9, 8, 7)).astype(F32) for _ in range(3)]
    xs = [small_ints(rng, (2, 4, 9, 8), F32) for _ in range(3)]
    ws = [small_ints(rng, (6, 4, 3, 3), F32) for _ in range(3)]
    return {
        "gaussian_filter (3 passes)": (
            lambda a: ndimage.gaussian_filter(a[0], 1.0), [(a,) for a in v],
            lambda a: lookup(ndimage.gaussian_filter, a[0], 1.0)),
        "conv gemm (vol2col + GEMM)": (
            lambda a: cupyconv.conv(a[0], a[1], padding=1, method="gemm"), list(zip(xs, ws)),
            lambda a: lookup(cupyconv.conv, a[0], a[1], padding=1, method="gemm")),
        "uniform_filter (3 passes, host divisions)": (
            lambda a: ndimage.uniform_filter(a[0], 3), [(a,) for a in v],
            lambda a: lookup(ndimage.uniform_filter, a[0], 3)),
    }


@pytest.mark.parametrize("name", ["gaussian_filter (3 passes)", "conv gemm (vol2col + GEMM)",
                                  "uniform_filter (3 passes, host divisions)"])
def test_graphed_replays_equal_the_normal_path_and_capture_once(emulated, rng, name):
    call, data, find = _cases(rng)[name]
    with normal_path():
        refs = [call(a) for a in data]
    with graphs_on(StandInGraphs()) as api:
        called_twice(call, data[0])                         # normal path, then recorded
        ys = [call(a) for a in data + data]                 # replays: one capture
        entry = find(data[0])
    assert isinstance(entry, CompiledCall) and entry.graph is not None, entry
    assert entry.graph.reason is None and entry.graph.captures == 1 and len(api.graphs) == 1
    assert repr(entry).endswith("; replayed as one CUDA graph)")
    assert [e for e in api.log if e[0] == "launch"] == [("launch", 0)] * len(ys)
    for y, ref in zip(ys, refs + refs):
        np.testing.assert_array_equal(y, ref, err_msg=name)
    assert len({data_pointer(y) for y in ys}) == len(ys)    # a fresh result per call
    assert entry.device_bytes >= entry.graph.device_bytes > 0


def test_replay_repoints_exactly_the_user_slots(emulated, rng):
    """A 3-pass Gaussian: the first pass's node gets the input's pointer, the last pass's
    the result's, per call; the middle pass (pass buffers only) is never touched, and no
    data is copied (every buffer it re-points is a launch's only)."""
    v = [rng.standard_normal((9, 8, 7)).astype(F32) for _ in range(3)]
    with graphs_on(StandInGraphs()) as api:
        called_twice(ndimage.gaussian_filter, v[0], 1.0)
        for a in v:
            del api.log[:]
            y = ndimage.gaussian_filter(a, 1.0)
            sets = [e for e in api.log if e[0] == "set"]
            assert not [e for e in api.log if e[0] == "copy"]
            nodes = api.graphs[0].nodes
            assert len(nodes) == 3 and {e[1] for e in sets} == {0, 2}
            first, last = (dict((e[1], e[2]) for e in sets)[i] for i in (0, 2))
            assert data_pointer(a) in first and data_pointer(y) in last
            assert data_pointer(a) not in last and data_pointer(y) not in first
            assert data_pointer(a) not in nodes[1]["ptrs"] and data_pointer(y) not in \
                nodes[1]["ptrs"]


def test_library_steps_read_and_write_owned_buffers_through_copies(emulated, rng):
    """gemm: cuBLAS reads the weights and writes the result, so the weights are copied
    into the graph's buffer before the launch and the result out after it; the vol2col
    node is re-pointed to the new input."""
    x, w = small_ints(rng, (2, 4, 9, 8), F32), small_ints(rng, (6, 4, 3, 3), F32)
    with graphs_on(StandInGraphs()) as api:
        called_twice(cupyconv.conv, x, w, padding=1, method="gemm")
        del api.log[:]
        y = cupyconv.conv(x, w, padding=1, method="gemm")
    copies = [e for e in api.log if e[0] == "copy"]
    assert [(c[2], c[3]) for c in copies] == [(data_pointer(w), w.nbytes),
                                               (copies[1][2], y.nbytes)]
    assert copies[1][1] == data_pointer(y)
    kinds = [e[0] for e in api.log]
    assert kinds.index("copy") < kinds.index("launch") < len(kinds) - 1 - kinds[::-1].index(
        "copy")
    assert [e for e in api.log if e[0] == "set"][0][2][0] == data_pointer(x)


def test_a_capture_failure_falls_back_to_the_plain_replay(emulated, rng):
    x, w = small_ints(rng, (2, 4, 9, 8), F32), small_ints(rng, (6, 4, 3, 3), F32)
    with normal_path():
        ref = cupyconv.conv(x, w, padding=1, method="gemm")
    with graphs_on(StandInGraphs(fail="cuBLAS refused to run while capturing")) as api:
        called_twice(cupyconv.conv, x, w, padding=1, method="gemm")
        ys = [cupyconv.conv(x, w, padding=1, method="gemm") for _ in range(2)]
        entry = lookup(cupyconv.conv, x, w, padding=1, method="gemm")
    assert "capture failed" in entry.graph.reason and "cuBLAS refused" in entry.graph.reason
    assert "not graphed: capture failed" in repr(entry)             # what plan.explain() shows
    assert not [e for e in api.log if e[0] == "launch"]
    for y in ys:
        np.testing.assert_array_equal(y, ref)
    assert entry.device_bytes == compiled._cache.nbytes == 0        # gave up: holds nothing


def test_one_step_calls_and_the_default_are_not_graphed(emulated, rng):
    a, k = small_ints(rng, (12, 11), F32), small_ints(rng, (3, 3), F32)
    with graphs_on(StandInGraphs()) as api:
        called_twice(cupyconv.convolve, a, k, "same", method="direct")
        assert lookup(cupyconv.convolve, a, k, "same", method="direct").graph is None
    assert not api.graphs
    assert config.cuda_graphs is False                       # off until a device check
    v = rng.standard_normal((9, 8, 7)).astype(F32)
    with cupyconv.use_backend("emulated"):
        called_twice(ndimage.gaussian_filter, v, 1.0)
        assert lookup(ndimage.gaussian_filter, v, 1.0).graph is None
    assert graphs.api_for(np) is None                         # no graphs of host arrays


def test_the_topological_order_of_a_graph():
    assert graphs._topological([3, 1, 2], [(1, 2), (2, 3)]) == [1, 2, 3]
    assert graphs._topological(["a", "b"], []) == ["a", "b"]


def test_a_captured_graph_counts_its_buffers_against_the_byte_bound(emulated, rng):
    v = rng.standard_normal((9, 8, 7)).astype(F32)
    saved = config.compiled_call_bytes
    try:
        with graphs_on(StandInGraphs()):
            called_twice(ndimage.gaussian_filter, v, 1.0)
            entry = lookup(ndimage.gaussian_filter, v, 1.0)
            # three pass buffers of the input's size, and the three passes' taps
            assert entry.device_bytes == 3 * v.nbytes + 3 * 9 * 4
            assert compiled._cache.nbytes == entry.device_bytes
            config.compiled_call_bytes = entry.device_bytes - 1
            called_twice(ndimage.gaussian_filter, v, 1.0)   # another key (the bound is in it)
            entry = lookup(ndimage.gaussian_filter, v, 1.0)
            assert isinstance(entry, NotCompiled) and "compiled_call_bytes" in entry.reason
    finally:
        config.compiled_call_bytes = saved


def test_eight_threads_on_one_graph_give_the_sequential_results(emulated, rng):
    v = [rng.standard_normal((9, 8, 7)).astype(F32) for _ in range(4)]
    with normal_path():
        refs = [ndimage.gaussian_filter(a, 1.0) for a in v]
    with graphs_on(StandInGraphs()) as api:
        called_twice(ndimage.gaussian_filter, v[0], 1.0)

        def work(t):
            with cupyconv.use_backend("emulated"):
                return [(t, j) for j in ((t + i) % 4 for i in range(4))
                        if not np.array_equal(ndimage.gaussian_filter(v[j], 1.0), refs[j])]
        assert not in_threads(work)
    assert len(api.graphs) == 1


def test_a_driver_error_while_replaying_falls_back_for_good(emulated, rng):
    v = [rng.standard_normal((9, 8, 7)).astype(F32) for _ in range(3)]
    with normal_path():
        refs = [ndimage.gaussian_filter(a, 1.0) for a in v]

    class Refusing(StandInGraphs):
        def set_pointers(self, graph, node, launch, pointers):
            raise RuntimeError("cuGraphExecKernelNodeSetParams failed with CUresult 1")

    with graphs_on(Refusing()) as api:
        called_twice(ndimage.gaussian_filter, v[0], 1.0)
        ys = [ndimage.gaussian_filter(a, 1.0) for a in v]
        entry = lookup(ndimage.gaussian_filter, v[0], 1.0)
    assert entry.graph.reason.startswith("replay failed: RuntimeError: cuGraphExec")
    assert not [e for e in api.log if e[0] == "launch"]
    for y, ref in zip(ys, refs):
        np.testing.assert_array_equal(y, ref)


# ------------------------------------------------------------ the driver side, by ctypes
def test_the_kernel_node_struct_has_the_driver_layout():
    """``CUDA_KERNEL_NODE_PARAMS`` (cuda.h, v1): func at 0, the six dims from 8, shared
    memory at 32, kernelParams at 40, extra at 48 (the v2 fields after it are room only)."""
    p = graphs._KernelNodeParams
    assert [getattr(p, f).offset for f in ("func", "gridDimX", "blockDimZ", "sharedMemBytes",
                                          "kernelParams", "extra")] == [0, 8, 28, 32, 40, 48]


class _FakeLibcuda:
    """The five ``libcuda`` entry points :class:`graphs.CupyGraphs` calls, as Python
    functions reading and writing through the ctypes arguments they are given."""

    def __init__(self, nodes, edges, kinds, functions):
        self.set = []

        def get_nodes(g, out, n):
            n._obj.value = len(nodes)
            for i, node in enumerate(nodes if out is not None else ()):
                out[i] = node
            return 0

        def get_edges(g, src, dst, n):
            n._obj.value = len(edges)
            for i, (a, b) in enumerate(edges if src is not None else ()):
                src[i], dst[i] = a, b
            return 0

        def node_type(node, kind):
            kind._obj.value = kinds[node.value]
            return 0

        def kernel_params(node, p):
            p._obj.func = functions[node.value]
            return 0

        def set_params(exec_, node, p):
            q = p._obj
            argv = (ctypes.c_uint64 * 3).from_address(q.kernelParams)
            self.set.append((exec_.value, node.value, q.func, (q.gridDimX, q.gridDimY),
                             q.blockDimX, q.sharedMemBytes, ctypes.string_at(argv[0], 4),
                             [ctypes.c_uint64.from_address(a).value for a in argv[1:]]))
            return 0
        self.cuGraphGetNodes, self.cuGraphGetEdges = get_nodes, get_edges
        self.cuGraphNodeGetType, self.cuGraphKernelNodeGetParams = node_type, kernel_params
        self.cuGraphExecKernelNodeSetParams = set_params


def test_the_driver_calls_find_kernel_nodes_in_order_and_set_their_pointers():
    """Nodes listed out of order, a memcpy node (type 1) among them: the kernel nodes come
    back in the edges' order with their functions; a parameter update hands the driver
    the launch's function, dims, shared memory, parameter bytes and the new pointers."""
    cu = _FakeLibcuda(nodes=[30, 10, 20], edges=[(10, 20), (20, 30)],
                      kinds={10: 0, 20: 1, 30: 0}, functions={10: 0xA, 30: 0xB})
    api = graphs.CupyGraphs(None, cu)
    handle = graphs._Captured(None, 0x1000, 0x2000, ())
    assert api.kernel_nodes(handle) == [(10, 0xA), (30, 0xB)]
    launch = program.Launch(types.SimpleNamespace(_fptr=0xB), (3, 2), (64,), 128,
                            np.array(7, np.int32), ("x", "y"))
    api.set_pointers(handle, 30, launch, [0x5000, 0x6000])
    assert cu.set == [(0x2000, 30, 0xB, (3, 2), 64, 128, np.int32(7).tobytes(),
                       [0x5000, 0x6000])]


def test_graphs_on_a_gpu_equal_the_normal_path(dev, rng):
    """On CuPy (a device check): with ``config.cuda_graphs`` the 3-pass Gaussian and the
    gemm layer give the normal path's results, graphed or not (gemm's cuBLAS is refused
    under capture by CuPy 14.2: it must fall back and say so)."""
    if dev.name != "cuda":
        pytest.skip("CUDA graphs are CuPy's (the emulator runs them on a stand-in above)")
    off = graphs.graphs_off_reason()
    if off:                  # graphs off (this CuPy), which is not graphs broken
        pytest.skip(f"graphs off: {off}")
    v = dev.to_dev(rng.standard_normal((9, 8, 7)).astype(F32))
    x, w = (dev.to_dev(small_ints(rng, s, F32)) for s in ((2, 4, 9, 8), (6, 4, 3, 3)))
    calls = {"gaussian": (lambda: ndimage.gaussian_filter(v, 1.0),
                          lambda: lookup(ndimage.gaussian_filter, v, 1.0)),
             "gemm": (lambda: cupyconv.conv(x, w, padding=1, method="gemm"),
                      lambda: lookup(cupyconv.conv, x, w, padding=1, method="gemm"))}
    saved = config.cuda_graphs
    try:
        for name, (call, find) in calls.items():
            config.compiled_calls = False
            ref = dev.to_host(call())
            config.compiled_calls, config.cuda_graphs = True, True
            for _ in range(3):
                np.testing.assert_array_equal(dev.to_host(call()), ref, err_msg=name)
            entry = find()
            assert entry.graph is not None, (name, entry)
            assert entry.graph.reason is None or "capture failed" in entry.graph.reason, (
                name, entry.graph.reason)
            config.cuda_graphs = False
    finally:
        config.cuda_graphs, config.compiled_calls = saved, True
