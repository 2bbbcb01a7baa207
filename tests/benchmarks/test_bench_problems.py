"""The benchmark problem sets are well-formed (cupyconv/_bench/problems.py)."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))   # the repo root

from cupyconv._bench.problems import KINDS, cases, suite_names  # noqa: E402

from cupyconv import ConvProblem  # noqa: E402

ALL = [(s, q) for s in suite_names() for q in (False, True)]


@pytest.mark.parametrize("suite,quick", ALL)
def test_every_case_builds_a_valid_problem(suite, quick):
    selected = cases(suite, quick)
    assert selected
    names = [c.name for c in selected]
    assert len(set(names)) == len(names)
    for case in selected:
        assert case.kind in KINDS
        problem = case.problem()
        assert isinstance(problem, ConvProblem)
        assert problem.flops > 0 and problem.bytes_moved > 0
        assert problem.dtype == np.dtype(case.dtype)
        if case.kind != "signal":
            assert problem.x_shape == case.x_shape and problem.w_shape == case.w_shape
            assert problem.layout == case.layout


def test_scientific_covers_the_issue():
    sci = cases("scientific")
    assert {c.ndim for c in sci} == {1, 2, 3, 4, 5, 6}
    assert {c.mode for c in sci} == {"same", "valid", "full"}
    assert {c.dtype for c in sci} == {"float32", "float64", "complex64"}
    assert {c.func for c in sci} == {"convolve", "correlate"}
    assert all(c.kind == "signal" for c in sci)
    kernels = [k for c in sci if c.ndim > 1 for k in c.kernel]
    assert min(kernels) == 3 and max(kernels) == 31
    assert any(c.shape == (2**20,) and c.kernel == (2**12,) for c in sci)


def test_deep_learning_and_gradients_cover_the_issue():
    dl = cases("deep_learning")
    assert {c.ndim for c in dl} == {2, 3, 4, 5}
    assert {c.layout for c in dl} == {"channels_first", "channels_last"}
    assert any(c.stride == 2 for c in dl) and any(c.dilation == 2 for c in dl)
    chans = [v for c in dl for v in (c.cin, c.cout)]
    assert min(chans) == 16 and max(chans) == 256
    assert min(c.batch for c in dl) == 1 and max(c.batch for c in dl) == 32
    for quick in (False, True):
        grads = cases("gradients", quick)
        assert {(c.kind, c.ndim) for c in grads} == {
            (k, r) for k in ("grad_input", "grad_weight") for r in (3, 4)}


def test_quick_is_cpu_scale_and_composites():
    assert sum(c.problem().flops for c in cases("all", quick=True)) < 1e10
    assert len(cases("all")) == sum(len(cases(s)) for s in
                                    ("scientific", "deep_learning", "gradients"))
    cpu = cases("cpu_scientific")
    assert {c.ndim for c in cpu} == {2, 3, 4, 5}
    assert max(max(c.kernel) for c in cpu) == 15


def test_signal_problem_matches_the_library_mapping():
    from cupyconv.api.signal import signal_problem
    case = cases("scientific", quick=True)[5]          # complex correlate, same
    a = np.zeros(case.shape, case.dtype)
    b = np.zeros(case.kernel, case.dtype)
    call, _, _, _ = signal_problem(a, b, case.mode, None, True)
    assert case.problem() == call.problem


def test_unknown_suite_is_a_value_error():
    with pytest.raises(ValueError, match="unknown suite 'nope'"):
        cases("nope")
