"""A repeated call sees the weights' values of its own call.

Compiled calls, plans and ``ConvOperator`` replay the programs of an earlier call with
the same key; a program whose launches or taps were shaped by the weights' *values* on
the host (``separable``'s factors, a data scan) must not be replayed on other values.
For every algorithm and dtype, on the NumPy and emulated backends, the weights change
between calls (written in place, so the key is the same, or a new array) and every
call must give what a fresh normal-path call on the same values gives, bit for bit:
the same programs on the same data, or the same error.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import cupyconv
from cupyconv._dtypes import BFLOAT16
from cupyconv._vocabulary import METHODS
from helpers import normal_path

BACKENDS = [b for b in ("numpy", "emulated") if b in cupyconv.available_backends()]
DTYPES = [np.dtype(t) for t in (np.bool_, np.uint8, np.int16, np.int32, np.int64,
                                np.uint64, np.float16, np.float32, np.float64,
                                np.complex64, np.complex128)]
if BFLOAT16 is not None:
    DTYPES.append(BFLOAT16)
X_SHAPE, K = (1, 1, 5, 5), 3

#: Errors an algorithm may raise for a dtype or kernel it does not take (``separable`` on
#: a kernel that is no outer product, a method without an integer path).
REFUSALS = (ValueError, TypeError, NotImplementedError)


def _values(dtype):
    """Integers the dtype holds exactly: {0, 1} for bool, [0, 3] unsigned, else [-3, 3]."""
    lo = 0 if dtype.kind in "bu" else -3
    return st.integers(lo, 1 if dtype.kind == "b" else 3)


@st.composite
def kernels(draw, dtype):
    """A 3x3 kernel: an outer product of two small integer vectors (``separable``
    takes it) or any small integer matrix (it takes it only where it is one)."""
    v = _values(dtype)
    vec = st.lists(v, min_size=K, max_size=K)
    if draw(st.booleans()):
        k = np.outer(draw(vec), draw(vec))
    else:
        k = np.array(draw(st.lists(vec, min_size=K, max_size=K)))
    return k.astype(dtype)


def _outcome(fn):
    """``fn()``'s result as a host copy, or ``(type, message)`` of a refusal."""
    try:
        y = fn()
    except REFUSALS as exc:
        return (type(exc), str(exc))
    return np.array(y, copy=True)


def _same(got, want, what):
    if isinstance(want, tuple) or isinstance(got, tuple):
        assert got == want, what
        return
    assert got.dtype == want.dtype, what
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=what)


def _changed(w, new, in_place):
    """``w`` holding ``new``'s values: written into ``w`` (same pointer, same key) or a
    fresh array of the same layout."""
    if in_place:
        w[...] = new
        return w
    return new.copy()


def _scenario(dtype):
    return st.tuples(kernels(dtype), kernels(dtype), st.booleans())


def _each_backend_and_dtype(test):
    """``test(backend, dtype, data)`` for every backend and dtype, a few drawn kernels
    each (small: every example runs every algorithm several times)."""
    test = settings(max_examples=3)(given(data=st.data())(test))
    test = pytest.mark.parametrize("dtype", DTYPES, ids=str)(test)
    return pytest.mark.parametrize("backend", BACKENDS)(test)


@_each_backend_and_dtype
def test_a_repeated_conv_call_or_plan_sees_new_weight_values(backend, dtype, data):
    k1, k2, in_place = data.draw(_scenario(dtype))
    x = (np.arange(np.prod(X_SHAPE)) % 4).reshape(X_SHAPE).astype(dtype)
    for method in METHODS:
        what = f"{backend} {dtype} {method}"
        w = k1[None, None].copy()

        def fresh(wv):
            with normal_path(), cupyconv.use_backend(backend):
                return _outcome(lambda: cupyconv.conv(x.copy(), wv.copy(), padding=1,
                                                      method=method))

        with cupyconv.use_backend(backend):
            try:
                plan = cupyconv.plan_conv(X_SHAPE, w.shape, dtype, padding=1, method=method,
                                          backend=backend)
            except REFUSALS:
                plan = None
            for _ in range(2):                    # the second call replays the first's key
                _same(_outcome(lambda: cupyconv.conv(x, w, padding=1, method=method)),
                      fresh(w), what + " call")
                if plan is not None:
                    _same(_outcome(lambda: plan(x, w)), fresh(w), what + " plan")
            w = _changed(w, k2[None, None], in_place)
            _same(_outcome(lambda: cupyconv.conv(x, w, padding=1, method=method)),
                  fresh(w), what + " call, new weights")
            if plan is not None:
                _same(_outcome(lambda: plan(x, w)), fresh(w), what + " plan, new weights")


@_each_backend_and_dtype
def test_a_conv_operator_sees_writes_to_its_kernel(backend, dtype, data):
    k1, k2, _ = data.draw(_scenario(dtype))
    shape = X_SHAPE[2:]
    for method in METHODS:
        what = f"{backend} {dtype} {method}"
        k = k1.copy()
        with cupyconv.use_backend(backend):
            try:
                op = cupyconv.ConvOperator(k, shape, method=method)
            except REFUSALS:
                continue
        v = (np.arange(op.shape[1]) % 5 - 2).astype(op.dtype)
        u = (np.arange(op.shape[0]) % 3 - 1).astype(op.dtype)

        def fresh():
            with normal_path(), cupyconv.use_backend(backend):
                ref = cupyconv.ConvOperator(k.copy(), shape, method=method)
                return _outcome(lambda: ref.matvec(v)), _outcome(lambda: ref.rmatvec(u))

        with cupyconv.use_backend(backend):
            for step in range(3):
                if step == 2:
                    k[...] = k2                   # the operator reads its kernel every call
                want = fresh()
                _same(_outcome(lambda: op.matvec(v)), want[0], f"{what} matvec {step}")
                _same(_outcome(lambda: op.rmatvec(u)), want[1], f"{what} rmatvec {step}")


def test_a_half_precision_separable_call_is_not_replayed_on_other_weights():
    """The reported case: float16 weights widened on the host, then factored."""
    if "emulated" not in BACKENDS:
        pytest.skip("no emulated backend")
    x = np.arange(16.0, dtype=np.float16).reshape(1, 1, 4, 4)
    w1 = np.outer([1, 2, 1], [1, 0, -1]).astype(np.float16)[None, None]
    w4 = np.outer([3, 1, 2], [2, 5, 1]).astype(np.float16)[None, None]
    not_separable = np.arange(9.0, dtype=np.float16).reshape(1, 1, 3, 3) ** 2
    with cupyconv.use_backend("emulated"):
        cupyconv.conv(x, w1, method="separable")
        cupyconv.conv(x, w1, method="separable")
        y = cupyconv.conv(x, w4, method="separable")
        with pytest.raises(ValueError, match="separable"):
            cupyconv.conv(x, not_separable, method="separable")
    np.testing.assert_array_equal(y.ravel(), [202, 250, 394, 442])
