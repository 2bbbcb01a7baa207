"""Issue 24: launch programs and compiled calls on the CUDA path.

Each body runs on the emulated runner (and on CuPy where a GPU is present).  A compiled
call must give what the normal path gives, bit for bit: both execute the same programs
with the same parameter bytes, so every comparison here is ``array_equal``, never a
tolerance.  The normal path is the same call with ``config.compiled_calls`` off.
"""
from __future__ import annotations

import ctypes
import sys
import threading
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import cupyconv
from cupyconv import config, ndimage
from cupyconv._kernels import launch, program, registry
from cupyconv.api import compiled
from cupyconv.api.compiled import SEEN_ONCE, CompiledCall, NotCompiled, lookup
from cupyconv.backends.cuda import algorithms, runners, winograd
from cupyconv.backends.cuda.prebuilt_launch import prebuilt_program
from cupyconv.core.problem import ConvProblem
from helpers import (alternate_against_the_normal_path, called_twice, first_and_repeated,
                     forget_launches, in_threads, normal_path, small_ints)

F32 = np.dtype(np.float32)


def _data(rng, *shapes, dtype=F32):
    return [small_ints(rng, s, dtype) for s in shapes]


# ------------------------------------------------------------ launch programs
#: implicit-GEMM tiles every view can run (variants 3 and 4 need channels-last operands).
TILES = [t for t in registry.gemm_tiles(F32) if t[3] < 3]


@pytest.mark.parametrize("family,tile", [("direct", None), ("winograd", None), ("gemm", None)]
                         + [("implicit_gemm", t) for t in TILES], ids=lambda v: str(v))
def test_a_cached_program_on_new_data_equals_its_first_run(dev, rng, family, tile):
    """One program per problem and strides (memoised: the same object); executed on new
    data it computes what a freshly built program computes, and again on the first data
    exactly its first result."""
    problem = ConvProblem.create(x_shape=(2, 8, 6, 7), w_shape=(8, 8, 3, 3), padding=1,
                                 dtype=F32)
    x1, w1, x2, w2 = (dev.to_dev(a) for a in _data(rng, problem.x_shape, problem.w_shape,
                                                  problem.x_shape, problem.w_shape))
    runner = runners.runner_for(dev.name)
    loader = runner.loader

    def build(x, w):
        if family == "direct":
            return launch.direct_program(loader, problem, x, w)
        if family == "winograd":        # weight transform, two launches, a batched GEMM
            return winograd.winograd_program(problem, x, w, runner)
        if family == "gemm":            # vol2col launch, cuBLAS into y
            return algorithms.gemm_program(problem, x, runner, None)
        return launch.implicit_gemm_program(loader, problem, x, w, tile=tile)

    def run(prog, x, w):
        bound = dict(x=x, w=w) if family in ("winograd", "gemm") else dict(x=x, w=w, bias=None)
        return dev.to_host(program.execute(prog, dev.xp, bound)[prog.result]).copy()

    prog = build(x1, w1)
    assert build(x2, w2) is prog and prog.launches
    # Winograd: the transform buffer and U; gemm: the columns
    assert prog.workspace_count == {"winograd": 2, "gemm": 1}.get(family, 0)
    first = run(prog, x1, w1)
    second = run(prog, x2, w2)
    forget_launches()
    fresh = build(x2, w2)
    assert fresh is not prog
    np.testing.assert_array_equal(second, run(fresh, x2, w2))
    np.testing.assert_array_equal(run(prog, x1, w1), first)


# ------------------------------------------------------------ compiled calls
def _calls(dev, rng):
    """``{name: (call, (launches, allocations, cuBLAS calls[, syncs]))}``: the public calls
    the issue pins (small shapes) and what a repeated one asks of the device: one
    allocation per program (the result; a multi-pass filter's pass buffers are its other
    programs' results), Winograd's transform buffer and ``U`` besides, and its batched
    GEMM."""
    x, w = (dev.to_dev(a) for a in _data(rng, (2, 4, 9, 8), (6, 4, 3, 3)))
    a, k = (dev.to_dev(a) for a in _data(rng, (12, 11), (3, 3)))
    v = dev.to_dev(rng.standard_normal((9, 8, 7)).astype(F32))
    xl, wl = dev.xp.moveaxis(x, 1, -1).copy(), dev.xp.moveaxis(w, 1, -1).copy()
    bias = dev.to_dev(np.arange(6, dtype=F32))
    plan = cupyconv.plan_conv(x.shape, w.shape, F32, padding=1, backend=dev.name)
    wino = cupyconv.plan_conv(x.shape, w.shape, F32, padding=1, method="winograd",
                              backend=dev.name)
    one = (1, 1, 0)
    return {
        "conv (auto)": (lambda: cupyconv.conv(x, w, padding=1), one),
        "conv implicit_gemm": (lambda: cupyconv.conv(x, w, padding=1, method="implicit_gemm"),
                               one),
        "convolve direct": (lambda: cupyconv.convolve(a, k, "same", method="direct"), one),
        "correlate implicit_gemm": (lambda: cupyconv.correlate(a, k, method="implicit_gemm"),
                                    one),
        "ndimage.gaussian_filter (3 passes)": (lambda: ndimage.gaussian_filter(v, 1.0),
                                               (3, 3, 0)),
        "ndimage.correlate": (lambda: ndimage.correlate(v, dev.xp.ones((3, 1, 2), F32)), one),
        "plan(x, w)": (lambda: plan(x, w), one),
        # the weight-transform launch into U, the two transforms, the batched GEMM; the
        # NaN/Inf warning's one-flag scan: 1 launch, its zeroed result, 1 sync, 1 copy;
        # a plan promises its problem, not its data: its repeated call does not scan
        "conv winograd": (lambda: cupyconv.conv(x, w, padding=1, method="winograd"),
                          (4, 4, 1, 1)),
        "planned winograd": (lambda: wino(x, w), (3, 3, 1)),
        "conv gemm": (lambda: cupyconv.conv(x, w, padding=1, method="gemm"), (1, 2, 1)),
        # host steps (bias and layout; the moving average's division per pass): "calls"
        "conv bias, channels_last": (lambda: cupyconv.conv(
            xl, wl, bias, padding=1, layout="channels_last"), one),
        "ndimage.uniform_filter (3 passes)": (lambda: ndimage.uniform_filter(v, 3), (3, 3, 0)),
    }


def test_repeated_calls_replay_and_meet_the_budget(dev, rng):
    """A repeated float conv, convolve (direct or implicit GEMM), ndimage filter, planned
    and Winograd call: 0 synchronisations, 0 copies (an explicit Winograd: the one scan's
    1 and 1), exactly the programs' launches, allocations and GEMMs (:func:`_calls`); the
    result equals the normal path's bit for bit."""
    for name, (call, budget) in _calls(dev, rng).items():
        ref, first, again, y = first_and_repeated(dev, call)
        np.testing.assert_array_equal(y, ref, err_msg=name)
        launches, allocations, library, *scans = budget
        assert (again["launches"], again["allocations"], again["library"]) == (
            launches, allocations, library), (name, again)
        scans = scans[0] if scans else 0
        assert (again["syncs"], again["d2h"], again["h2d"]) == (scans, scans, 0), (name, again)
        assert first["launches"] >= again["launches"], name


def test_numpy_calls_replay_the_host_tap_loop(rng):
    """On the NumPy backend the tap loop is a host program: a repeated tiny call of every
    rank is a compiled call (validation and dispatcher skipped) equal to the normal path."""
    cases = [((64,), (3,)), ((32, 32), (3, 3)), ((6, 5, 7), (3, 1, 2)),
             ((4, 3, 5, 4), (2, 2, 1, 3))]
    for s1, s2 in cases:
        a, k = rng.standard_normal(s1), rng.standard_normal(s2)
        with normal_path():
            ref = cupyconv.convolve(a, k, method="direct")
        called_twice(cupyconv.convolve, a, k, method="direct")
        entry = lookup(cupyconv.convolve, a, k, method="direct")
        assert isinstance(entry, CompiledCall) and entry.programs[0].host is not None
        np.testing.assert_array_equal(cupyconv.convolve(a, k, method="direct"), ref)
    v = rng.standard_normal((7, 6, 5))
    with normal_path():
        ref = ndimage.gaussian_filter(v, 1.0)
    called_twice(ndimage.gaussian_filter, v, 1.0)
    assert len(lookup(ndimage.gaussian_filter, v, 1.0).programs) == 3
    np.testing.assert_array_equal(ndimage.gaussian_filter(v, 1.0), ref)


def test_a_key_compiles_on_its_second_call_only(monkeypatch, rng):
    """A key called once is only noted (nothing recorded, compiled or kept); its second
    call records and compiles; later calls replay without compiling again."""
    made = []
    real = compiled._compile
    monkeypatch.setattr(compiled, "_compile", lambda *a, **k: made.append(1) or real(*a, **k))
    a, k = rng.standard_normal((12, 11)), rng.standard_normal((3, 3))
    with normal_path():
        ref = cupyconv.convolve(a, k, method="direct")
    np.testing.assert_array_equal(cupyconv.convolve(a, k, method="direct"), ref)
    assert made == [] and lookup(cupyconv.convolve, a, k, method="direct") is SEEN_ONCE
    np.testing.assert_array_equal(cupyconv.convolve(a, k, method="direct"), ref)
    assert made == [1]
    assert isinstance(lookup(cupyconv.convolve, a, k, method="direct"), CompiledCall)
    for _ in range(2):
        np.testing.assert_array_equal(cupyconv.convolve(a, k, method="direct"), ref)
    assert made == [1]


def test_a_compiled_call_is_cached_with_its_programs(dev, rng):
    x, w = (dev.to_dev(a) for a in _data(rng, (1, 2, 6, 6), (3, 2, 3, 3)))
    with dev.scope():
        cupyconv.conv(x, w, padding=1)
        assert lookup(cupyconv.conv, x, w, padding=1) is SEEN_ONCE    # noted, not compiled
        cupyconv.conv(x, w, padding=1)
        entry = lookup(cupyconv.conv, x, w, padding=1)
        assert isinstance(entry, CompiledCall) and entry.programs[0].name in (
            "direct", "implicit_gemm")
        assert lookup(cupyconv.conv, x, w, padding=2) is None          # another key
        cupyconv.clear_caches()
        assert lookup(cupyconv.conv, x, w, padding=1) is None


def _not_compiled_reason(dev, call, fn, *args, **kwargs):
    with dev.scope():
        called_twice(call)
        entry = lookup(fn, *args, **kwargs)
    assert isinstance(entry, NotCompiled), entry
    return entry.reason


def test_calls_outside_programs_take_the_normal_path_with_a_reason(dev, rng):
    x, w = (dev.to_dev(a) for a in _data(rng, (1, 2, 6, 6), (3, 2, 3, 3)))
    b = dev.to_dev(np.arange(3, dtype=F32))
    with dev.scope():                         # a bias is a host step: compiled
        called_twice(cupyconv.conv, x, w, b, padding=1)
        assert isinstance(lookup(cupyconv.conv, x, w, b, padding=1), CompiledCall)
    wc = (w + 1j).astype(np.complex64)         # real x with complex w: x cast, a temporary
    why = _not_compiled_reason(dev, lambda: cupyconv.conv(x, wc, padding=1, method="fft"),
                               cupyconv.conv, x, wc, padding=1, method="fft")
    assert "a temporary" in why
    a = dev.to_dev(small_ints(rng, (6, 6), np.int32))
    why = _not_compiled_reason(dev, lambda: ndimage.correlate(a, a[:3, :3]),
                               ndimage.correlate, a, a[:3, :3])
    assert "overlap" in why or "weights' values" in why


def test_the_plan_says_which_path_it_takes(dev, rng):
    x, w = (dev.to_dev(a) for a in _data(rng, (1, 2, 6, 6), (3, 2, 3, 3)))
    direct = cupyconv.plan_conv(x.shape, w.shape, F32, padding=1, method="direct",
                                backend=dev.name)
    assert "repeated calls replay, from the third call" in direct.explain()
    called_twice(direct, x, w)
    assert direct.explain().startswith("runs direct on the ")
    assert "; repeated calls replay (CompiledCall(direct" in direct.explain()
    assert "repeated calls replay (CompiledCall(" in repr(direct)
    cupyconv.clear_caches()                                  # the plans' caches too
    assert "repeated calls replay, from the third call" in direct.explain()
    fft = cupyconv.plan_conv(x.shape, w.shape, F32, padding=1, method="fft",
                             backend=dev.name)
    called_twice(fft, x, w)    # float data: the first two calls scan to warn, a replay not
    assert "; repeated calls replay (CompiledCall(fft:" in fft.explain()
    assert "does not scan for NaN/Inf" in fft.explain()


@st.composite
def _call_case(draw):
    """A small conv call (rank 1-2, float32/64, any boundary, a view of x or not)."""
    rank = draw(st.integers(1, 2))
    ks = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    spatial = tuple(draw(st.integers(k + 1, k + 6)) for k in ks)   # >= 2: reflect's need
    return dict(shape=(draw(st.integers(1, 2)), draw(st.integers(1, 3))) + spatial,
                k=draw(st.integers(1, 3)), ks=ks,
                dtype=draw(st.sampled_from([np.float32, np.float64])),
                view=draw(st.sampled_from(["as is", "flipped", "sliced"])),
                padding=draw(st.integers(0, 2)),
                padding_mode=draw(st.sampled_from(["constant", "reflect", "wrap", "edge"])),
                method=draw(st.sampled_from(["auto", "direct", "implicit_gemm"])),
                layout=draw(st.sampled_from(["channels_first", "channels_last"])))


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_call_case(), seed=st.integers(0, 2**16))
def test_compiled_calls_equal_the_normal_path(any_dev, case, seed):
    """Whatever the geometry, view and layout, the first and the repeated calls give the
    normal path's result bit for bit (compiled or not)."""
    dev, rng = any_dev, np.random.default_rng(seed)
    x = dev.to_dev(small_ints(rng, case["shape"], case["dtype"]))
    x = {"as is": x, "flipped": x[..., ::-1], "sliced": x[:, :, 1:]}[case["view"]]
    if case["layout"] == "channels_last":
        x = dev.xp.moveaxis(x, 1, -1)
    c = case["shape"][1]
    w = small_ints(rng, (case["k"], c) + case["ks"], case["dtype"])
    w = dev.to_dev(np.moveaxis(w, 1, -1) if case["layout"] == "channels_last" else w)
    if min(x.shape[2:] if case["layout"] == "channels_first" else x.shape[1:-1]) < max(
            case["ks"]):
        return                                      # a sliced x shorter than the kernel
    kw = {k: case[k] for k in ("padding", "padding_mode", "method", "layout")}
    with dev.scope():
        with normal_path():
            ref = dev.to_host(cupyconv.conv(x, w, **kw))
        for _ in range(2):
            np.testing.assert_array_equal(dev.to_host(cupyconv.conv(x, w, **kw)), ref)


# ------------------------------------------------------------ invalidation
def _invalidation_cases(dev, rng):
    """``(name, [calls])``: each list alternates calls whose keys differ in one thing."""
    xp = dev.xp
    x, w = (dev.to_dev(a) for a in _data(rng, (2, 3, 8, 8), (4, 3, 3, 3)))
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    wide = dev.to_dev(small_ints(rng, (2, 3, 8, 9), F32))
    flat = dev.to_dev(small_ints(rng, (2 * 3 * 8 * 8 + 1,), F32))
    shifted = flat[1:].reshape(x.shape)          # 4 bytes past a 16-byte boundary
    v = dev.to_dev(rng.standard_normal((6, 7, 5)).astype(F32))

    def conv(*a, **k):
        return lambda: cupyconv.conv(*a, padding=1, **k)

    def tf32():
        config.precision = "tf32"
        try:
            return cupyconv.conv(x, w, padding=1)
        finally:
            config.precision = "highest"

    return [
        ("shapes", [conv(x, w), conv(wide, w), conv(x[:1], w)]),
        ("dtypes", [conv(x, w), conv(x64, w64), conv(x, w64)]),
        ("strides", [conv(x, w), conv(xp.ascontiguousarray(x.transpose(0, 1, 3, 2)), w),
                     conv(x.transpose(0, 1, 3, 2), w)]),
        ("views", [conv(x, w), conv(x[:, :, ::-1], w), conv(x[:, 1:], w[:, 1:]),
                   conv(x[:, :, 1:7, 2:], w)]),
        ("misaligned", [conv(x, w), conv(shifted, w)]),
        ("out", [conv(x, w), lambda: cupyconv.conv(x, w, padding=1,
                                                   out=xp.empty((2, 4, 8, 8), F32))]),
        ("config", [conv(x, w), tf32, conv(x, w)]),
        ("keywords typed", [conv(x, w, cval=0), conv(x, w, cval=0.0),
                            conv(x, w, padding_mode="reflect")]),
        ("filters", [lambda: ndimage.gaussian_filter(v, 1.0),
                     lambda: ndimage.gaussian_filter(v, 1.5),
                     lambda: ndimage.gaussian_filter(v, 1.0, mode="nearest"),
                     lambda: ndimage.gaussian_filter(v[::2], 1.0)]),
        # parameters given as NumPy arrays: the same key, other values (SciPy's own
        # test_filter_axes_kwargs replayed the first call's axes before they were compared)
        ("host-read arrays", [lambda: ndimage.gaussian_filter(v, [1.0, 1.0], axes=np.array([0, 1])),
                              lambda: ndimage.gaussian_filter(v, [1.0, 1.0], axes=np.array([1, 2])),
                              lambda: ndimage.uniform_filter(v, np.array([3, 1, 5])),
                              lambda: ndimage.uniform_filter(v, np.array([5, 1, 3])),
                              lambda: ndimage.correlate1d(v, [1.0, 2.0], origin=np.array(0)),
                              lambda: ndimage.correlate1d(v, [1.0, 2.0], origin=np.array(-1))]),
    ]


def test_alternating_keys_never_replay_a_stale_program(any_dev, rng):
    """Alternate calls that differ in one thing each, three rounds: every result equals
    the normal path's, so no call ever replays another key's program (the NumPy
    backend's host programs included)."""
    dev = any_dev
    for name, calls in _invalidation_cases(dev, rng):
        alternate_against_the_normal_path(dev, name, calls)


def test_the_backend_in_force_is_in_the_key(rng):
    """The same NumPy arrays on the numpy and the emulated backend, alternating: each call
    replays its own backend's program (a host program, a launch program)."""
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("the emulated backend is not available here")
    x, w = _data(rng, (1, 2, 6, 6), (3, 2, 3, 3))
    for _ in range(2):
        called_twice(cupyconv.conv, x, w, padding=1, method="direct")
        with cupyconv.use_backend("emulated"):
            called_twice(cupyconv.conv, x, w, padding=1, method="direct")
            launched = lookup(cupyconv.conv, x, w, padding=1, method="direct")
        host = lookup(cupyconv.conv, x, w, padding=1, method="direct")
        assert host.programs[0].host is not None and launched.programs[0].launches
    with program.accounting() as counts:
        cupyconv.conv(x, w, padding=1, method="direct")
    assert counts["launches"] == 0


def test_out_aliasing_an_input_takes_the_result_of_the_normal_path(any_dev, rng):
    dev = any_dev
    a, k = (dev.to_dev(b) for b in _data(rng, (10, 10), (3, 3)))
    with dev.scope():
        with normal_path():
            ref = dev.to_host(cupyconv.convolve(a, k, "same"))
        for _ in range(2):
            b = a.copy()
            res = cupyconv.convolve(b, k, "same", out=b)          # out is in1
            assert res is b
            np.testing.assert_array_equal(dev.to_host(b), ref)


def test_the_key_holds_typed_values_nans_and_devices(monkeypatch):
    x = np.zeros((1, 1, 4, 4), F32)
    key = compiled.call_key
    assert key((x, 2), {})[0] != key((x, 2.0), {})[0] != key((x, True), {})[0]
    assert key((x,), {"cval": float("nan")}) == (None, None)          # never matches
    assert key((x,), {"cval": np.float32("nan")}) == (None, None)
    assert key((x, {"a": 1}), {}) == (None, None)                     # unhashable: normal
    assert key((x.astype(">f4"),), {})[0] != key((x,), {})[0]         # byte order
    # a second device, through a stand-in of CuPy's array and runtime
    current = {"id": 0}
    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(
        getDevice=lambda: current["id"]))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    ndarray = type("ndarray", (), {"__module__": "cupy._core.core"})

    def on(device):
        a = ndarray()
        a.shape, a.strides, a.dtype = (4,), (4,), F32
        a.data, a.device = types.SimpleNamespace(ptr=256), types.SimpleNamespace(id=device)
        return a
    k0 = key((on(0),), {})[0]
    assert key((on(1),), {})[0] != k0
    current["id"] = 1
    assert key((on(0),), {})[0] != k0                                 # the current device


def test_an_out_of_memory_during_replay_runs_the_normal_path(dev, rng, monkeypatch):
    x, w = (dev.to_dev(a) for a in _data(rng, (1, 2, 6, 6), (3, 2, 3, 3)))
    with dev.scope():
        ref = dev.to_host(called_twice(cupyconv.conv, x, w, padding=1))
        assert isinstance(lookup(cupyconv.conv, x, w, padding=1), CompiledCall)
        real, failed = program.allocate, []

        def once(xp, shape, dtype):
            if not failed:
                failed.append(shape)
                raise MemoryError("injected")
            return real(xp, shape, dtype)
        monkeypatch.setattr(program, "allocate", once)
        np.testing.assert_array_equal(dev.to_host(cupyconv.conv(x, w, padding=1)), ref)
    assert failed


def test_eight_threads_give_the_sequential_results(any_dev, rng):
    """Same and different keys from 8 threads at once equal the sequential results."""
    dev = any_dev
    xs = [dev.to_dev(a) for a in _data(rng, (1, 2, 7, 6), (1, 2, 5, 6), (2, 2, 7, 6))]
    w = dev.to_dev(small_ints(rng, (3, 2, 3, 3), F32))
    with dev.scope(), normal_path():
        refs = [dev.to_host(cupyconv.conv(x, w, padding=1)) for x in xs]

    def work(i):
        with dev.scope():
            for r in range(6):
                j = (i + r) % 3 if i % 2 else 0          # odd: different keys; even: one
                y = dev.to_host(cupyconv.conv(xs[j], w, padding=1))
                if not np.array_equal(y, refs[j]):
                    yield (i, r, j)
    assert not in_threads(lambda i: list(work(i)))


# ------------------------------------------------------------ prebuilt CuPy launches
@pytest.mark.parametrize("slots", [("a",), ("a", "b", "a"),
                                   ("a", program.View("b", 4), program.View("b", 0, (2,), (4,), F32))])
def test_a_launch_is_handed_its_slots_in_order(slots):
    """:func:`program.execute` hands a launch the arrays of its slots in the kernel's order:
    by one ``itemgetter`` where every slot is a name (two or more), else slot by slot."""
    a, b = np.arange(4, dtype=F32), np.arange(8, dtype=F32)
    seen = []
    step = program.Launch(lambda grid, block, args, shared_mem=0: seen.append(args),
                          (1,), (1,), 0, b"params", slots)
    assert (step.pick is not None) == (len(slots) > 1 and all(type(x) is str for x in slots))
    program.execute(program.Program("p", ("a", "b"), (), (step,), "a"), np, {"a": a, "b": b})
    (args,), arrays = seen, {"a": a, "b": b}
    assert args[0] == b"params" and len(args) == 1 + len(slots)
    for got, slot in zip(args[1:], slots):
        if type(slot) is str:
            assert got is arrays[slot]
        else:
            assert program.data_pointer(got) == program.data_pointer(b) + slot.offset


def test_prebuilt_launches_hand_the_driver_the_struct_and_the_pointers():
    """A stand-in of ``cupy.cuda.driver`` reads back, through the argument array it is
    given, the parameter struct's bytes and each operand's pointer; grid, block, shared
    memory and stream are the launch's.  Each thread fills its own slots."""
    problem = ConvProblem.create(x_shape=(1, 2, 6, 5), w_shape=(3, 2, 3, 3), padding=1,
                                 dtype=F32)
    x, w = np.ones(problem.x_shape, F32), np.ones(problem.w_shape, F32)
    raw = types.SimpleNamespace(kernel=types.SimpleNamespace(ptr=0xF00))
    loader = types.SimpleNamespace(get_function=lambda name: raw)
    prog = launch.direct_program(loader, problem, x, w)
    seen = []

    class Driver:
        @staticmethod
        def launchKernel(f, gx, gy, gz, bx, by, bz, smem, stream, argv, extra):
            n = len(prog.launches[0].slots)
            addrs = (ctypes.c_uint64 * (n + 1)).from_address(argv)
            size = prog.launches[0].params.dtype.itemsize
            params = ctypes.string_at(addrs[0], size)
            ptrs = [ctypes.c_uint64.from_address(a).value for a in addrs[1:]]
            seen.append((f, (gx, gy, gz), (bx, by, bz), smem, stream, params, ptrs, extra))

    fast = prebuilt_program(prog, Driver, lambda: 77)
    step = prog.launches[0]

    def fake(ptr):
        return types.SimpleNamespace(data=types.SimpleNamespace(ptr=ptr))

    def run(base):
        bound = dict(x=fake(base), w=fake(base + 16), bias=None, y=fake(base + 32))
        program.execute(fast, None, bound)

    threads = [threading.Thread(target=run, args=(4096 * (i + 1),)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 4
    for f, grid, block, smem, stream, params, ptrs, extra in seen:
        assert (f, smem, stream, extra) == (0xF00, step.shared_mem, 77, 0)
        assert grid == tuple(step.grid) + (1,) * (3 - len(step.grid))
        assert block == tuple(step.block) + (1,) * (3 - len(step.block))
        assert params == np.array(step.params).tobytes()
        base = ptrs[0]
        assert ptrs == [base, base + 16, base + 32, base + 32]     # x, w, y, y (no bias)
    assert sorted(s[6][0] for s in seen) == [4096 * (i + 1) for i in range(4)]
    emulated = launch.direct_program(runners.EmulatedRunner().loader, problem, x, w)
    assert prebuilt_program(emulated, Driver, lambda: 0) is emulated     # not CuPy kernels


def test_prebuilt_launches_on_a_gpu_equal_the_normal_path(dev, rng):
    """On CuPy (a device check) the prebuilt launches give the normal path's results."""
    if dev.name != "cuda":
        pytest.skip("prebuilt launches are CuPy's (the emulator has no driver)")
    saved = config.prebuilt_launches
    config.prebuilt_launches = True
    try:
        for name, (call, _) in _calls(dev, rng).items():
            with normal_path():
                ref = dev.to_host(call())
            for _ in range(3):
                np.testing.assert_array_equal(dev.to_host(call()), ref, err_msg=name)
    finally:
        config.prebuilt_launches = saved
