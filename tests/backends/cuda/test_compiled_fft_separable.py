"""Issue 24: ``fft`` and ``separable`` as launch programs, replayed by compiled calls.

Each body runs on the emulated runner (and on CuPy where a GPU is present; the
invalidation cases on the NumPy backend too).  A compiled call must give what the normal
path gives, bit for bit: both execute the same program (the same library calls on the
same arrays, the same launches with the same parameter bytes), so every comparison here is
``array_equal``, never a tolerance.  The normal path is the same call with
``config.compiled_calls`` off.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import cupyconv
from cupyconv import config
from cupyconv._kernels import program
from cupyconv.api.compiled import HOST_VALUE_BYTES, CompiledCall, NotCompiled, lookup
from cupyconv.backends import fft_conv
from cupyconv.backends.cuda import runners, separable
from cupyconv.core.problem import ConvProblem
from helpers import (alternate_against_the_normal_path, called_twice, first_and_repeated,
                     forget_launches, small_ints)

F32 = np.dtype(np.float32)


class normal_path:
    """``config.compiled_calls`` off inside the block."""

    def __enter__(self):
        self.saved, config.compiled_calls = config.compiled_calls, False

    def __exit__(self, *exc):
        config.compiled_calls = self.saved


def _outer(rng, channels, *lengths, dtype=F32):
    """``(channels, 1, *lengths)`` small-integer outer products (exactly separable)."""
    factors = [small_ints(rng, (channels, n), np.float64) for n in lengths]
    k = factors[0]
    for f in factors[1:]:
        k = np.einsum("c...,cj->c...j", k, f)
    return k[:, None].astype(dtype)


# ------------------------------------------------------------ launch programs
#: fft geometries: slices only, and index arrays (a window starting before 0: padding
#: past the kernel's span, with a stride and a dilation) that become program constants.
FFT_GEOMETRIES = {"slices": dict(padding=1),
                  "index arrays": dict(padding=3, stride=2, dilation=(1, 2))}


@pytest.mark.parametrize("family", ["fft slices", "fft index arrays", "separable 1 term",
                                    "separable 2 terms"])
def test_a_cached_program_on_new_data_equals_its_first_run(dev, rng, family):
    """One program per problem (memoised: the same object); executed on new data it
    computes what a freshly built program computes, and again on the first data exactly
    its first result."""
    runner = runners.runner_for(dev.name)
    if family.startswith("fft"):
        geometry = FFT_GEOMETRIES[family[4:]]
        problem = ConvProblem.create(x_shape=(2, 4, 9, 8), w_shape=(6, 4, 3, 3), dtype=F32,
                                     **geometry)
        shapes, names = (problem.x_shape, problem.w_shape), ("x", "w")

        def build(*_):
            return fft_conv.forward_program(problem, dev.xp, F32, runner.constant)
    else:
        # 7x5 taps: up to two terms save taps (separable_factors.term_limit)
        problem = ConvProblem.create(x_shape=(2, 3, 12, 10), w_shape=(3, 1, 7, 5),
                                     padding=1, groups=3, dtype=F32)
        w = _outer(rng, 3, 7, 5)
        if family.endswith("2 terms"):
            w = w + _outer(rng, 3, 7, 5)                   # a sum of two outer products
        shapes, names = (problem.x_shape,), ("x",)

        def build(x):
            return separable.separable_program(problem, x, w, runner)
    first_data = [dev.to_dev(small_ints(rng, s, F32)) for s in shapes]
    new_data = [dev.to_dev(small_ints(rng, s, F32)) for s in shapes]

    def run(prog, arrays):
        bound = program.execute(prog, dev.xp, dict(zip(names, arrays)))
        return dev.to_host(bound[prog.result]).copy()

    prog = build(*first_data[:1])
    assert build(*new_data[:1]) is prog
    if family == "fft index arrays":
        assert prog.constants                     # the crop's index arrays, made once
    if family.startswith("separable"):
        assert len(prog.launches) == (4 if family.endswith("2 terms") else 2)
        assert [n for n, _ in prog.constants] and prog.workspace_count == 1   # pass buffer
    first = run(prog, first_data)
    second = run(prog, new_data)
    forget_launches()
    fresh = build(*new_data[:1])
    assert fresh is not prog
    np.testing.assert_array_equal(second, run(fresh, new_data))
    np.testing.assert_array_equal(run(prog, first_data), first)


# ------------------------------------------------------------ compiled calls
def _calls(dev, rng):
    """``{name: (call, (launches, allocations, library and array-module calls))}`` of the
    fft and separable calls that compile, with what a repeated one asks of the device."""
    a = dev.to_dev(small_ints(rng, (12, 11), F32))
    k, ki = (dev.to_dev(small_ints(rng, (3, 4), t)) for t in (F32, np.int64))
    ai = dev.to_dev(small_ints(rng, (12, 11), np.int64))
    x, wf = (dev.to_dev(small_ints(rng, s, F32)) for s in ((1, 3, 10, 9), (3, 3, 3, 3)))
    xi, wi = (dev.to_dev(small_ints(rng, s, np.int64)) for s in ((1, 3, 10, 9), (3, 3, 3, 3)))
    w2, k2 = _outer(rng, 3, 3, 3), dev.to_dev(_outer(rng, 1, 3, 3)[0, 0])
    planned = cupyconv.plan_conv(x.shape, w2.shape, F32, padding=1, groups=3,
                                 method="separable", backend=dev.name)
    fft_plan = cupyconv.plan_conv(xi.shape, wi.shape, np.int64, padding=1, method="fft",
                                  backend=dev.name)
    float_plan = cupyconv.plan_conv(x.shape, wf.shape, F32, padding=1, method="fft",
                                    backend=dev.name)
    # fft: pad/cast x, orient/cast w, two forward transforms, product, inverse into y
    fft = (0, 1, 6)
    calls = {
        "fftconvolve": (lambda: cupyconv.fftconvolve(a, k), fft),
        "fftconvolve same": (lambda: cupyconv.fftconvolve(a, k, "same"), fft),
        "oaconvolve valid": (lambda: cupyconv.oaconvolve(a, k, "valid"), fft),
        "convolve int64, fft": (lambda: cupyconv.convolve(ai, ki, method="fft"), fft),
        "conv int64 fft, stride 2": (lambda: cupyconv.conv(xi, wi, padding=2, stride=2,
                                                           method="fft"), fft),
        "planned fft, int64": (lambda: fft_plan(xi, wi), fft),
        # a plan promises its problem, not its data: a replay skips the warning's scan
        "planned fft, float32": (lambda: float_plan(x, wf), fft),
    }
    if dev.name != "cuda":    # weights the key keeps by value: NumPy arrays (see below)
        calls.update({
            # two 1-D passes (launches), y and one pass buffer
            "planned separable": (lambda: planned(x, w2), (2, 2, 0)),
            "convolve separable": (lambda: cupyconv.convolve(a, k2, "same",
                                                             method="separable"), (2, 2, 0)),
        })
    return calls


def test_repeated_calls_replay_and_meet_the_budget(dev, rng):
    """A repeated fftconvolve/oaconvolve, explicit integer fft (no data scan: no warning
    to decide), planned fft and planned separable call: 0 synchronisations, 0 copies,
    exactly the program's launches, allocations and calls; the result equals the normal
    path's."""
    for name, (call, budget) in _calls(dev, rng).items():
        ref, first, again, y = first_and_repeated(dev, call)
        np.testing.assert_array_equal(y, ref, err_msg=name)
        assert (again["launches"], again["allocations"], again["calls"]) == budget, (
            name, again)
        assert not any(again[k] for k in ("syncs", "d2h", "h2d")), (name, again)
        assert first["launches"] >= again["launches"], name


def _reason(dev, fn, *args, **kwargs):
    with dev.scope():
        called_twice(fn, *args, **kwargs)
        entry = lookup(fn, *args, **kwargs)
    assert isinstance(entry, NotCompiled), entry
    return entry.reason


def test_separable_weights_the_key_cannot_hold_take_the_normal_path(dev, rng):
    """Weights found on the host are compiled only when the key keeps their bytes: a NumPy
    array of at most HOST_VALUE_BYTES; device (CuPy) weights and larger ones are read per
    call (the reason says so)."""
    a = dev.to_dev(small_ints(rng, (40, 40), F32))
    n = int(np.sqrt(HOST_VALUE_BYTES // 4)) + 1                 # n*n*4 > HOST_VALUE_BYTES
    big = dev.to_dev(_outer(rng, 1, n, n)[0, 0])
    why = _reason(dev, cupyconv.convolve, a, big, "same", method="separable")
    assert "read on the host" in why or "device data" in why
    if dev.name == "cuda":
        small = dev.to_dev(_outer(rng, 1, 3, 3)[0, 0])
        why = _reason(dev, cupyconv.convolve, a, small, "same", method="separable")
        assert "device data" in why


def test_explicit_float_fft_warns_from_a_replayed_one_flag_check(dev, rng):
    """``convolve(method="fft")`` on float data warns on NaN/Inf as SciPy does: on the CUDA
    path one scan launch and one read, a step the compiled call replays (1 sync, 1 copy),
    so a repeated call on data turned non-finite in place still warns, at the caller's
    line; ``fftconvolve`` never warns, so it does not scan (0 syncs above)."""
    a, k = (dev.to_dev(small_ints(rng, s, F32)) for s in ((12, 11), (3, 4)))
    with dev.scope():
        for _ in range(2):
            cupyconv.convolve(a, k, method="fft")
        entry = lookup(cupyconv.convolve, a, k, method="fft")
        assert isinstance(entry, CompiledCall), entry
        assert [p.name for p in entry.programs] == ["data_scan", "fft"]
        with program.accounting() as again:
            cupyconv.convolve(a, k, method="fft")
        assert (again["syncs"], again["d2h"], again["h2d"], again["launches"]) == (1, 1, 0, 1)
        a[3, 4] = np.nan                                         # the same key
        with normal_path():
            with pytest.warns(RuntimeWarning, match="Use of fft convolution"):
                ref = dev.to_host(cupyconv.convolve(a, k, method="fft"))
        with pytest.warns(RuntimeWarning, match="Use of fft convolution") as seen:
            y = cupyconv.convolve(a, k, method="fft")
        assert seen[0].filename == __file__
        np.testing.assert_array_equal(dev.to_host(y), ref)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with normal_path():
                ref = dev.to_host(cupyconv.fftconvolve(a, k))
            for _ in range(2):          # no warning, and NaN spread as SciPy's
                np.testing.assert_array_equal(dev.to_host(cupyconv.fftconvolve(a, k)), ref)


@st.composite
def _fft_case(draw):
    """A small explicit-fft or separable conv call (rank 1-2, any stride, dilation,
    zero padding, dtype; separable: rank 2, depthwise, an outer product)."""
    method = draw(st.sampled_from(["fft", "separable"]))
    rank = draw(st.integers(1, 2)) if method == "fft" else 2     # separable: 2+ axes
    ks = tuple(draw(st.integers(1, 4)) for _ in range(rank))
    kinds = ["float32", "float64", "int64"] + (["complex64"] if method == "fft" else [])
    return dict(rank=rank, ks=ks, method=method, dtype=np.dtype(draw(st.sampled_from(kinds))),
                spatial=tuple(draw(st.integers(k + 1, k + 7)) for k in ks),
                channels=draw(st.integers(1, 3)), stride=draw(st.integers(1, 2)),
                dilation=draw(st.integers(1, 2)), padding=draw(st.integers(0, 3)))


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_fft_case(), seed=st.integers(0, 2**16))
def test_compiled_fft_and_separable_calls_equal_the_normal_path(any_dev, case, seed):
    """Whatever the geometry and dtype, the first and repeated fft/separable calls give
    the normal path's result bit for bit (compiled or not; integers exact)."""
    dev, rng = any_dev, np.random.default_rng(seed)
    c, dtype = case["channels"], case["dtype"]
    x = small_ints(rng, (2, c) + case["spatial"], np.float64)
    if case["method"] == "fft":
        w = small_ints(rng, (c + 1, c) + case["ks"], np.float64)
        groups = 1
    else:
        w, groups = _outer(rng, c, *case["ks"], dtype=np.float64), c
    if dtype.kind == "c":
        x, w = x + 1j * x[..., ::-1], w - 2j * w
    x, w = (dev.to_dev(a.astype(dtype)) for a in (x, w))
    kw = dict(stride=case["stride"], dilation=case["dilation"], padding=case["padding"],
              groups=groups, method=case["method"])
    with dev.scope(), warnings.catch_warnings():
        warnings.simplefilter("ignore")             # separable refusals are errors, not these
        with normal_path():
            try:
                ref = dev.to_host(cupyconv.conv(x, w, **kw))
            except ValueError:                      # a geometry the method refuses
                return
        for _ in range(2):
            np.testing.assert_array_equal(dev.to_host(cupyconv.conv(x, w, **kw)), ref)


# ------------------------------------------------------------ invalidation
def _invalidation_cases(dev, rng):
    """``(name, [calls])``: each list alternates calls whose keys differ in one thing."""
    a, a2 = (dev.to_dev(small_ints(rng, s, F32)) for s in ((12, 11), (13, 11)))
    k = dev.to_dev(small_ints(rng, (3, 4), F32))
    a64, k64 = a.astype(np.float64), k.astype(np.float64)
    kc = (k + 1j * k[::-1]).astype(np.complex64)
    ac = (a - 2j * a).astype(np.complex64)
    ai, ki = a.astype(np.int64), k.astype(np.int64)
    w1, w2 = (dev.to_dev(_outer(rng, 1, 3, 3)[0, 0]) for _ in range(2))
    w1b = w1 * 2                                    # the same key, other values
    fc = cupyconv.fftconvolve
    sep = cupyconv.convolve

    def out_is_in1():
        b = ai.copy()
        res = cupyconv.convolve(b, ki, "same", method="fft", out=b)
        assert res is b
        return b
    return [
        ("fft shapes", [lambda: fc(a, k), lambda: fc(a2, k), lambda: fc(a[:, :7], k),
                        lambda: fc(a, k[:2])]),
        ("fft dtypes", [lambda: fc(a, k), lambda: fc(a64, k64), lambda: fc(a, k64),
                        lambda: fc(ai, ki)]),
        ("fft complex/real", [lambda: fc(a, k), lambda: fc(a, kc), lambda: fc(ac, kc),
                              lambda: fc(ac, k)]),
        ("fft modes", [lambda: fc(a, k), lambda: fc(a, k, "same"), lambda: fc(a, k, "valid"),
                       lambda: cupyconv.oaconvolve(a, k, "same")]),
        ("fft out aliasing in1", [lambda: cupyconv.convolve(ai, ki, "same", method="fft"),
                                  out_is_in1]),
        ("separable weights' values", [lambda: sep(a, w1, "same", method="separable"),
                                       lambda: sep(a, w1b, "same", method="separable"),
                                       lambda: sep(a, w2, "same", method="separable")]),
        ("separable shapes", [lambda: sep(a, w1, "same", method="separable"),
                              lambda: sep(a2, w1, "same", method="separable"),
                              lambda: sep(a, w1[:2], "same", method="separable")]),
    ]


def test_alternating_keys_never_replay_a_stale_program(any_dev, rng):
    """Alternate calls that differ in one thing each, three rounds: every result equals
    the normal path's, so no call replays another key's program or weights."""
    for name, calls in _invalidation_cases(any_dev, rng):
        alternate_against_the_normal_path(any_dev, name, calls)


def test_a_compiled_separable_call_is_cached_with_its_program(rng):
    """On the emulated runner a repeated separable call with NumPy weights is a compiled
    call of one ``separable`` program (the weights kept by value)."""
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("the emulated backend is not available here")
    a, w = small_ints(rng, (12, 11), F32), _outer(rng, 1, 3, 3)[0, 0]
    with cupyconv.use_backend("emulated"):
        called_twice(cupyconv.convolve, a, w, "same", method="separable")
        entry = lookup(cupyconv.convolve, a, w, "same", method="separable")
    assert isinstance(entry, CompiledCall) and entry.programs[0].name == "separable"
    assert [i for i, _ in entry.host_values] == [1]          # w, compared by its bytes


@pytest.fixture
def fft_first(monkeypatch):
    """The CUDA path's cost model with ``fft`` ranked first under ``auto`` (the others in
    their own order after it), the cached choices forgotten before and after."""
    from cupyconv.backends.cuda import CudaBackend
    from cupyconv.dispatch import dispatcher
    real = CudaBackend.predict_times

    def predict(self, problem, names):
        times = real(self, problem, names)
        return {n: (0.0 if n == "fft" else 1.0 + t) for n, t in times.items()}
    dispatcher.clear_cache()
    monkeypatch.setattr(CudaBackend, "predict_times", predict)
    yield
    dispatcher.clear_cache()


def test_auto_with_fft_first_replays_its_scan_and_rechecks_the_choice(dev, rng, fft_first):
    """``auto`` with ``fft`` ranked first scans its operands (one launch, one read) as a
    program step; a compiled call replays that step and expects its recorded outcome:
    data that now decide otherwise (a NaN planted in place, the same key; or the NaN
    gone) take the normal path, which chooses again, so each result is the normal path's
    for those data, and auto never warns."""
    a, k = (dev.to_dev(small_ints(rng, s, F32)) for s in ((12, 11), (3, 4)))
    b = dev.to_dev(small_ints(rng, (12, 10), F32))   # another key
    b[5, 2] = np.inf                            # starts non-finite: fft refused
    with dev.scope(), warnings.catch_warnings():
        warnings.simplefilter("error")
        for arr in (a, b):
            for _ in range(2):
                cupyconv.convolve(arr, k, "same")
        entry = lookup(cupyconv.convolve, a, k, "same")
        assert [p.name for p in entry.programs] == ["data_scan", "fft"], entry
        assert lookup(cupyconv.convolve, b, k, "same").programs[-1].name != "fft"
        with program.accounting() as again:
            cupyconv.convolve(a, k, "same")
        assert (again["syncs"], again["d2h"], again["h2d"]) == (1, 1, 0)
        a[3, 4], b[5, 2] = np.nan, 1.0            # each now decides the other way
        for arr in (a, b, a, b):
            with normal_path():
                ref = dev.to_host(cupyconv.convolve(arr, k, "same"))
            np.testing.assert_array_equal(dev.to_host(cupyconv.convolve(arr, k, "same")),
                                          ref)


@pytest.mark.parametrize("method", ["fft", "direct"])
def test_out_is_a_replayed_step_into_each_calls_array(any_dev, rng, method):
    """``out=`` is a host step (a copy into ``out``) whose result is ``out`` itself: a
    repeated call with another ``out`` of the same key writes into that one and returns
    it, with the normal path's values; the first ``out`` keeps what it was given."""
    dev = any_dev
    x, w = (dev.to_dev(small_ints(rng, s, np.int64)) for s in ((2, 3, 9, 8), (4, 3, 3, 3)))
    outs = [dev.xp.zeros((2, 4, 9, 8), np.int64) for _ in range(3)]
    with dev.scope():
        with normal_path():
            ref = dev.to_host(cupyconv.conv(x, w, padding=1, method=method))
        for i, o in enumerate(outs):
            res = cupyconv.conv(x + i, w, padding=1, method=method, out=o)
            assert res is o
        if dev.name != "numpy":
            entry = lookup(cupyconv.conv, x, w, padding=1, method=method, out=outs[0])
            assert isinstance(entry, CompiledCall) and entry.programs[-1].name == "out"
        with normal_path():
            refs = [dev.to_host(cupyconv.conv(x + i, w, padding=1, method=method))
                    for i in range(3)]
    np.testing.assert_array_equal(refs[0], ref)
    for o, r in zip(outs, refs):
        np.testing.assert_array_equal(dev.to_host(o), r)
