"""Issue 24 item 4: ``auto``'s decisions on NumPy data as guards of a compiled call.

A tiny 3-D ``convolve`` under ``auto`` ranks ``fft`` and ``separable`` first on the NumPy
backend; both decide on the data (the fft scan for non-finite values, the kernel's
outer-product factoring).  On NumPy arrays those decisions are guards: a repeated call
replays its host program while each decision comes out as it did on the first call, and
takes the normal path as soon as one does not.  Every result must equal the normal
path's (``config.compiled_calls`` off) bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv.api.compiled import CompiledCall, NotCompiled, lookup
from helpers import called_twice, normal_path

#: ``(name, in1 shape, in2 shape)``: calls ``auto`` runs by SciPy's FFT on one signal.
FFT_CASES = [("3-D", (16, 16, 16), (3, 3, 3)), ("2-D", (40, 40), (9, 9))]


def _normal(*args, **kwargs):
    with normal_path():
        return cupyconv.convolve(*args, **kwargs)


@pytest.mark.parametrize("name,s1,s2", FFT_CASES, ids=[c[0] for c in FFT_CASES])
def test_a_tiny_fft_call_under_auto_compiles_with_its_guards(rng, name, s1, s2):
    a, k = rng.standard_normal(s1), rng.standard_normal(s2)
    if cupyconv.choose_conv_method(a, k) != "fft":
        pytest.skip(f"auto does not choose fft for {name} on this machine's cost model")
    ref = _normal(a, k)
    np.testing.assert_array_equal(called_twice(cupyconv.convolve, a, k), ref)
    entry = lookup(cupyconv.convolve, a, k)
    assert isinstance(entry, CompiledCall), entry
    assert entry.programs[0].name == "numpy fft" and entry.guards
    np.testing.assert_array_equal(cupyconv.convolve(a, k), ref)


#: what changes between calls of the same key: the data (finite, a NaN, an Inf) and
#: the kernel (random: fft; an outer product: separable; back to the first).
def _variants(rng):
    a, k = rng.standard_normal((16, 16, 16)), rng.standard_normal((3, 3, 3))
    nan, inf = a.copy(), a.copy()
    nan[3, 4, 5] = np.nan
    inf[0, 0, 0] = -np.inf
    outer = np.einsum("i,j,k->ijk", *(rng.standard_normal(3) for _ in range(3)))
    return [("finite", a, k), ("a NaN", nan, k), ("finite again", a, k),
            ("an infinity", inf, k), ("an outer-product kernel", a, outer),
            ("the first kernel", a, k), ("another kernel", a, rng.standard_normal((3, 3, 3)))]


def test_a_decision_that_comes_out_otherwise_takes_the_normal_path(rng):
    """Alternate data and kernels under one key, three rounds: each result is the normal
    path's (NaN where it has NaN), so no replay ever skips a decision that would differ."""
    cases = _variants(rng)
    with np.errstate(invalid="ignore"):
        refs = [_normal(a, k) for _, a, k in cases]
        for _ in range(3):
            for (name, a, k), ref in zip(cases, refs):
                np.testing.assert_array_equal(cupyconv.convolve(a, k), ref, err_msg=name)


def test_an_explicit_fft_on_non_finite_data_warns_every_time(rng):
    """The warning of ``method='fft'`` on non-finite data is not replayed silently."""
    a, k = rng.standard_normal((16, 16, 16)), rng.standard_normal((3, 3, 3))
    a[1, 2, 3] = np.inf
    for _ in range(3):
        with pytest.warns(RuntimeWarning, match="NAN or inf"):
            cupyconv.convolve(a, k, method="fft")


def test_on_the_emulated_runner_the_scan_is_a_device_step_not_a_guard(rng):
    """The emulated runner stands in for a GPU, where the scan reads device data: an
    explicit Winograd call's NaN/Inf scan (it only decides a warning) is the program's
    one-flag device scan (a ``program.Check``), as on CuPy, never a host guard, though its
    arrays are NumPy's."""
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("the emulated backend is not available here")
    x = rng.integers(-3, 4, (1, 2, 6, 6)).astype(np.float32)
    w = rng.integers(-3, 4, (3, 2, 3, 3)).astype(np.float32)
    with cupyconv.use_backend("emulated"):
        called_twice(cupyconv.conv, x, w, padding=1, method="winograd")
        entry = lookup(cupyconv.conv, x, w, padding=1, method="winograd")
    assert not isinstance(entry, NotCompiled), entry
    assert entry.guards == () and "data_scan" in [p.name for p in entry.programs], entry
