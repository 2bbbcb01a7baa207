"""The dispatcher's rules, on a scripted backend (no arithmetic, no timing):

- candidates: what the vocabulary and ``can_implement`` allow, with reasons;
- safety: ``fft`` is never run by ``auto`` on data it cannot take exactly
  (integer results past float64's exact range, non-finite data or ``cval``);
- memory: ``auto`` refuses with a MemoryError naming the bytes when nothing
  fits, or when what fits would be far slower than what does not;
- fallback: after an out-of-memory, the next algorithm by decreasing workspace.

The real backends' behaviour under the same rules is in test_selection.py and
test_memory_fallback.py.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from cupyconv.backends.base import Backend, OutOfMemoryError
from cupyconv.core.problem import ConvProblem, Operands
from cupyconv.dispatch import dispatcher


class ScriptedBackend(Backend):
    """A backend whose answers are given: times, workspace, memory, failures."""

    def __init__(self, times, workspace=None, memory=2**40, unable=(), oom=(), name="numpy"):
        self.name, self.xp = name, np
        self.times, self.workspace = dict(times), dict(workspace or {})
        self.memory, self.unable, self.oom = memory, set(unable), set(oom)
        self.ran = []

    def can_implement(self, problem, algorithm):
        if algorithm in self.unable:
            return False, f"{algorithm} is scripted to decline"
        if algorithm not in self.times:          # (separable: not in the script)
            return False, f"{algorithm} is not in the script"
        return True, ""

    def workspace_bytes(self, problem, algorithm, workspace_limit=None):
        return self.workspace.get(algorithm, 0)

    def min_workspace_bytes(self, problem, algorithm):
        return self.workspace.get(algorithm, 0)

    def predict_times(self, problem, names):
        return {n: self.times[n] for n in names}

    def default_workspace_limit(self):
        return 2**40

    def available_memory(self):
        return self.memory

    def run(self, problem, algorithm, operands, workspace_limit, stats=None):
        self.ran.append(algorithm)
        if algorithm in self.oom:
            raise OutOfMemoryError(f"{algorithm} scripted out of memory")
        return np.full(problem.logical_result_shape, len(self.ran), problem.dtype)


FAST = dict(direct=3.0, implicit_gemm=4.0, gemm=2.0, fft=1.0)


def _problem(dtype=np.float64, **kw):
    return ConvProblem.create(x_shape=(1, 2, 9), w_shape=(3, 2, 3), dtype=dtype, **kw)


def _operands(p, x=None, w=None):
    x = np.ones((p.batch, p.in_channels) + p.in_shape, p.dtype) if x is None else x
    w = np.ones((p.out_channels, p.in_channels // p.groups) + p.kernel_shape,
                p.dtype) if w is None else w
    return Operands(activation=x, filter=w)


@pytest.fixture(autouse=True)
def fresh_choices():
    dispatcher.clear_cache()        # each test's scripted backends start with no choices
    yield
    dispatcher.clear_cache()


# ---------------------------------------------------------------- candidates

def test_candidates_follow_the_vocabulary_and_can_implement():
    be = ScriptedBackend(FAST, unable={"gemm"})
    choice = dispatcher.choose(_problem(), be)
    assert choice.ranked == ("fft", "direct", "implicit_gemm")
    assert choice.rejected == {"gemm": "gemm is scripted to decline",
                               "separable": "separable is not in the script",
                               "winograd": "winograd is not in the script"}
    grad = dispatcher.choose(_problem(op="grad_input"), be)
    assert grad.ranked == ("fft",)
    assert grad.rejected["direct"] == "direct does not serve grad_input on numpy"


def test_explicit_method_is_checked():
    be = ScriptedBackend(FAST, unable={"gemm"})
    p = _problem()
    with pytest.raises(ValueError, match=r"method='gemm' cannot run this problem: gemm is "
                                         r"scripted to decline"):
        dispatcher.run(p, _operands(p), be, method="gemm")
    g = _problem(op="grad_weight")
    with pytest.raises(ValueError, match=r"method='direct' cannot compute the grad_weight on "
                                         r"the numpy backend; choose 'auto', 'gemm' or 'fft'"):
        dispatcher.run(g, Operands(activation=np.ones((1, 2, 9)), output=np.ones((1, 3, 7))),
                       be, method="direct")
    assert not be.ran


# -------------------------------------------------------------------- safety

def test_auto_skips_fft_for_nonfinite_data():
    be = ScriptedBackend(FAST)
    p = _problem()
    x = np.ones((1, 2, 9))
    x[0, 1, 4] = np.nan
    _, name = dispatcher.run(p, _operands(p, x=x), be)
    assert name == "gemm" and be.ran == ["gemm"]
    _, name = dispatcher.run(p, _operands(p), be)                   # finite: fft first
    assert name == "fft"


def test_auto_skips_fft_for_large_integer_results():
    be = ScriptedBackend(FAST)
    p = _problem(dtype=np.int64)
    k = p.gemm_k                              # 2 channels * 3 taps
    limit = 2 ** (np.finfo(np.float64).nmant - 1)
    small = np.full((1, 2, 9), 1, np.int64)
    w_ok = np.full((3, 2, 3), (limit - 1) // k, np.int64)
    ok, _ = dispatcher.fft_safe(p, _operands(p, x=small, w=w_ok))
    assert ok
    w_big = np.full((3, 2, 3), -(-limit // k), np.int64)           # bound reaches 2**51
    ok, why = dispatcher.fft_safe(p, _operands(p, x=small, w=w_big))
    assert not ok and "not exactly representable" in why
    _, name = dispatcher.run(p, _operands(p, x=small, w=w_big), be)
    assert name == "gemm"


def test_integer_bound_does_not_wrap_at_the_minimum():
    """|int64 min| does not fit int64: the bound is taken from min/max as Python ints."""
    p = _problem(dtype=np.int64)
    x = np.zeros((1, 2, 9), np.int64)
    x[0, 0, 0] = np.iinfo(np.int64).min
    ok, _ = dispatcher.fft_safe(p, _operands(p, x=x))
    assert not ok


def test_complex_nonfinite_in_the_imaginary_part():
    p = _problem(dtype=np.complex128)
    x = np.ones((1, 2, 9), np.complex128)
    x[0, 0, 3] = complex(1.0, np.inf)
    assert not dispatcher.fft_safe(p, _operands(p, x=x))[0]
    assert dispatcher.fft_safe(p, _operands(p))[0]


def test_nonfinite_cval_is_no_fft_candidate():
    be = ScriptedBackend(FAST)
    choice = dispatcher.choose(_problem(padding=1, cval=np.inf), be)
    assert "fft" not in choice.ranked
    assert "non-finite cval" in choice.rejected["fft"]


def test_only_fft_with_unsafe_data_is_an_error():
    be = ScriptedBackend(FAST, unable={"direct", "implicit_gemm", "gemm"})
    p = _problem()
    x = np.full((1, 2, 9), np.nan)
    with pytest.raises(ValueError, match=r"no candidate can run on these operands \(fft: "
                                         r"non-finite data would spread"):
        dispatcher.run(p, _operands(p, x=x), be)
    assert not be.ran


def test_explicit_fft_on_nonfinite_data_warns_and_runs():
    be = ScriptedBackend(FAST)
    p = _problem()
    x = np.full((1, 2, 9), np.inf)
    with pytest.warns(RuntimeWarning, match="Use of fft convolution on input with NAN or inf"):
        _, name = dispatcher.run(p, _operands(p, x=x), be, method="fft")
    assert name == "fft"


# -------------------------------------------------------------------- memory

def test_result_and_workspace_must_fit_the_memory():
    p = _problem()
    result = 3 * 7 * 8
    be = ScriptedBackend(FAST, workspace=dict(fft=1000, gemm=500), memory=result + 600)
    choice = dispatcher.choose(p, be)
    assert choice.ranked == ("gemm", "direct", "implicit_gemm")
    assert choice.rejected["fft"] == (f"needs {result + 1000} bytes (result + workspace) "
                                       f"but {result + 600} bytes are available")
    assert choice.refusal is None          # the fallback is not much slower


def test_workspace_limit_excludes_before_memory():
    be = ScriptedBackend(FAST, workspace=dict(fft=1000, gemm=500))
    choice = dispatcher.choose(_problem(), be, workspace_limit=600)
    assert choice.limit == 600 and choice.ranked == ("gemm", "direct", "implicit_gemm")
    assert choice.rejected["fft"] == ("needs at least 1000 bytes of workspace but the "
                                       "workspace limit is 600 bytes")


def test_nothing_fits_is_a_memory_error_naming_the_bytes():
    p = _problem()
    be = ScriptedBackend(FAST, memory=10)                 # not even the result fits
    choice = dispatcher.choose(p, be)
    assert not choice.ranked and isinstance(choice.refusal, MemoryError)
    with pytest.raises(MemoryError, match=r"forward of x\(1, 2, 9\) \* w\(3, 2, 3\) -> "
                                          r"y\(1, 3, 7\) \(float64\): the result alone "
                                          r"needs 168 bytes .* but 10 bytes are "
                                          r"available; .*cupyconv.dask") as info:
        dispatcher.run(p, _operands(p), be)
    assert "workspace_limit" not in str(info.value)      # no limit makes the result fit
    assert not be.ran


def test_far_slower_fallback_is_refused_for_auto_only():
    """The fastest does not fit; the best that fits is > 100x slower and > 60 s."""
    p = _problem()
    times = dict(direct=1e4, implicit_gemm=2e4, gemm=3e4, fft=1.0)
    be = ScriptedBackend(times, workspace=dict(fft=10**6), memory=10**5)
    with pytest.raises(MemoryError, match=r"method='direct' fits but is predicted to take "
                                          r"1e\+04 s; pass it explicitly"):
        dispatcher.run(p, _operands(p), be)
    _, name = dispatcher.run(p, _operands(p), be, method="direct")    # explicit: runs
    assert name == "direct"


def test_slower_but_quick_fallback_runs():
    p = _problem()
    times = dict(direct=30.0, implicit_gemm=40.0, gemm=50.0, fft=0.01)  # 3000x, but < 60 s
    be = ScriptedBackend(times, workspace=dict(fft=10**6), memory=10**5)
    _, name = dispatcher.run(p, _operands(p), be)
    assert name == "direct"


def test_oom_falls_back_by_decreasing_workspace():
    p = _problem()
    be = ScriptedBackend(FAST, workspace=dict(fft=300, gemm=200), oom={"fft", "gemm"})
    stats = {}
    _, name = dispatcher.run(p, _operands(p), be, stats=stats)
    assert be.ran == ["fft", "gemm", "direct"] and name == "direct"
    assert stats["algorithm"] == "direct"
    assert stats["fallbacks"] == ["fft: fft scripted out of memory",
                                  "gemm: gemm scripted out of memory"]


@pytest.mark.parametrize("method", ["auto", "direct"])
def test_oom_fallback_never_reaches_unsafe_fft(method):
    """The safety rules hold after an out-of-memory too: when the first algorithm
    fails, the fallback skips fft for data it cannot take (here NaN), although
    fft has the largest workspace and would come next."""
    p = _problem()
    be = ScriptedBackend(dict(direct=1.0, implicit_gemm=2.0, gemm=3.0, fft=4.0),
                         workspace=dict(fft=300, gemm=200), oom={"direct"})
    x = np.ones((1, 2, 9))
    x[0, 0, 4] = np.nan
    _, name = dispatcher.run(p, _operands(p, x=x), be, method=method)
    assert "fft" not in be.ran and name == "gemm", be.ran


def test_explicit_method_falls_back_too():
    p = _problem()
    be = ScriptedBackend(FAST, workspace=dict(fft=300, gemm=200), oom={"implicit_gemm"})
    _, name = dispatcher.run(p, _operands(p), be, method="implicit_gemm")
    assert be.ran == ["implicit_gemm", "fft"] and name == "fft"


def test_empty_problem_runs_nothing():
    be = ScriptedBackend(FAST)
    p = ConvProblem.create(x_shape=(0, 2, 9), w_shape=(3, 2, 3))
    y, name = dispatcher.run(p, _operands(p), be)
    assert y.shape == (0, 3, 7) and name == "direct" and not be.ran
    g = ConvProblem.create(x_shape=(2, 0, 9), w_shape=(3, 0, 3), op="grad_weight")
    dw, _ = dispatcher.run(g, Operands(activation=np.ones((2, 0, 9)),
                                       output=np.ones((2, 3, 7))), be)
    assert dw.shape == (3, 0, 3) and not be.ran


# ---------------------------------------------------------------- data rules

class RefusingBackend(ScriptedBackend):
    """A stand-in for the data rules of ``separable`` (the kernel's factors) and
    ``winograd`` (finite data): ``data_ok`` refuses the algorithms in ``refuse``, and
    records what it was asked."""

    def __init__(self, times, refuse=(), **kw):
        super().__init__(times, **kw)
        self.refuse, self.asked = set(refuse), []

    def data_ok(self, problem, algorithm, operands, slack=float("inf")):
        self.asked.append(algorithm)
        if algorithm in self.refuse:
            return False, f"{algorithm} is scripted to refuse these data"
        return True, ""


def test_the_candidate_after_a_refused_fft_passes_its_own_rule():
    """Issue 25.1: fft first and NaN data; the next candidate (here a stand-in
    separable that refuses) was promoted unasked.  It is asked, refuses, and the one
    after it runs."""
    times = dict(fft=1.0, separable=2.0, direct=3.0, gemm=4.0, implicit_gemm=5.0)
    be = RefusingBackend(times, refuse={"separable"})
    p = _problem()
    x = np.ones((1, 2, 9))
    x[0, 0, 2] = np.nan
    stats = {}
    _, name = dispatcher.run(p, _operands(p, x=x), be, stats=stats)
    assert name == "direct" and be.ran == ["direct"] and stats["fallbacks"] == []
    assert "separable" in be.asked
    _, name = dispatcher.run(p, _operands(p), be)                   # finite: fft first
    assert name == "fft"


def test_every_candidate_refused_names_each_reason():
    be = RefusingBackend(dict(fft=1.0, separable=2.0, winograd=3.0),
                         refuse={"separable", "winograd"})
    p = _problem()
    x = np.full((1, 2, 9), np.inf)
    with pytest.raises(ValueError, match=r"no candidate can run on these operands \(fft: "
                                         r"non-finite data .*; separable: separable is "
                                         r"scripted to refuse these data; winograd: "):
        dispatcher.run(p, _operands(p, x=x), be)
    assert not be.ran


_RULED = ("fft", "separable", "winograd", "direct", "gemm", "implicit_gemm")


@given(order=st.permutations(_RULED), fft_first=st.booleans(),
       refuse=st.sets(st.sampled_from(_RULED)), nan=st.booleans(), every=st.booleans())
def test_auto_runs_the_first_candidate_whose_rule_passes(order, fft_first, refuse, nan, every):
    """Any ranking (``fft`` first half of the time: the issue's case), any stand-in
    refusals, finite or NaN data: ``ranked_for_data`` keeps exactly the candidates whose
    own rule passes, in rank order, as far as it asks (the first; every one when timing
    all), and ``run`` runs the first of them."""
    dispatcher.clear_cache()
    if fft_first:
        order = ["fft"] + [n for n in order if n != "fft"]
    times = {name: float(i + 1) for i, name in enumerate(order)}
    be = RefusingBackend(times, refuse=refuse)
    p = _problem()
    ops = _operands(p, x=np.full((1, 2, 9), np.nan) if nan else None)
    passing = [n for n in order if n not in refuse and not (n == "fft" and nan)]
    choice = dispatcher.choose(p, be)
    if not passing:
        with pytest.raises(ValueError, match="no candidate can run on these operands"):
            dispatcher.ranked_for_data(choice, p, ops, every=every, backend=be)
        return
    ranked = dispatcher.ranked_for_data(choice, p, ops, every=every, backend=be)
    assert ranked[0] == passing[0]
    if every:
        assert ranked == passing
    else:                      # the rest is the ranking after the first passing one
        assert ranked[1:] == [n for n in order if n in ranked[1:]]
    _, name = dispatcher.run(p, ops, be)
    assert name == passing[0] and be.ran == [passing[0]]


def test_a_new_backend_never_reads_a_freed_ones_choice():
    """Choices are keyed by the backend object, not its ``id()``: CPython gives a new
    object of the same size the address of one just freed, and the old key then gave
    the freed backend's ranking to the new one."""
    p = _problem()
    times = dict(direct=2.0, gemm=1.0)           # allocated first: the slot stays free
    assert dispatcher.choose(p, ScriptedBackend(dict(direct=1.0, gemm=2.0))).algorithm == "direct"
    new = ScriptedBackend(times)                 # (with the id() key: the freed one's id)
    assert dispatcher.choose(p, new).algorithm == "gemm"
