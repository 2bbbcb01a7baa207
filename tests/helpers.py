"""Test helpers shared by every cupyconv test directory.

Nothing here calls cupyconv: the references are written independently of
the implementation (tap loops over ``np.pad``-ed or sliced arrays, in
float64/complex128 or exact Python integers) so a bug cannot cancel out.

Contents
--------
* ``UNIT_ROUNDOFF`` -- per-dtype unit roundoff with the reason each entry
  is what it is; ``elementwise_bound``/``assert_elementwise``/
  ``assert_normwise`` turn it into the checks of reliability.md (b).
* ``ref_convolve`` -- scipy-semantics convolve/correlate reference
  (modes, valid-mode swap, ``axes`` with broadcasting batch axes);
  ``valid_mode_rejects`` says beforehand when it (and scipy) must raise.
* ``ref_conv`` -- deep-learning ``conv`` reference on an ``np.pad``-ed input.
* ``small_ints``/``random_array`` -- input generators.
* ``dual_run`` -- run one test body against scipy.signal and cupyconv.
* ``FakeCupyArray`` -- an object that looks like a CuPy array to the
  device check (``type(obj).__module__`` starts with "cupy").
* The named edge-case problem lists live in ``problem_lists.py``.
"""
from __future__ import annotations

import contextlib
import math

import numpy as np

from cupyconv._dtypes import BFLOAT16

PADDING_MODES = ("constant", "reflect", "symmetric", "wrap", "edge")

# --------------------------------------------------------------------------
# Tolerances
# --------------------------------------------------------------------------

#: dtype -> (unit roundoff u of the dtype the arithmetic accumulates in,
#: reason).  A check derives its bound from u and the reduction length K;
#: nothing here is tuned to make a test pass.
UNIT_ROUNDOFF = {
    np.dtype(np.float64): (2.0**-53, "IEEE binary64, round to nearest: u = 2**-53"),
    np.dtype(np.complex128): (
        2.0**-53, "real and imaginary parts are binary64; a complex multiply-add "
        "costs a few extra roundings, absorbed by the constant c"),
    np.dtype(np.float32): (
        2.0**-24, "IEEE binary32 accumulation (no float64 upcast on direct/gemm, "
        "BLAS sgemm): u = 2**-24"),
    np.dtype(np.complex64): (2.0**-24, "binary32 parts, as complex128 vs float64"),
    np.dtype(np.float16): (
        2.0**-24, "float16 accumulates in float32 (reliability.md item 20); the final "
        "rounding to float16 adds 2**-11 * |y| (see FINAL_ROUNDING)"),
}
#: Extra relative error of rounding the accumulated value to the result dtype.
FINAL_ROUNDING = {np.dtype(np.float16): 2.0**-11}
if BFLOAT16 is not None:
    UNIT_ROUNDOFF[BFLOAT16] = (2.0**-24, "bfloat16 accumulates in float32 (the m16n8k16 bf16 "
                               "atom and the kernels' float accumulators); the final rounding "
                               "to bfloat16 adds 2**-8 * |y| (8 significant bits)")
    FINAL_ROUNDING[BFLOAT16] = 2.0**-8
#: c in |y - y_ref| <= c * K * u * (|x| conv |w|): Higham's gamma_K = K*u/(1-K*u)
#: for a sum of K products, times 2 for the product rounding and complex parts.
ELEMENTWISE_C = 2.0
#: c for complex dtypes: a complex product rounds within sqrt(5) u of |x| |w| (Brent,
#: Percival, Zimmermann 2007), and so does a complex128 reference: 2 sqrt(5) < 4.
ELEMENTWISE_C_COMPLEX = 4.0
#: c in ||y - y_ref|| <= c * u * log2(L) * sqrt(n) * || |x| conv |w| ||_full.
#: A forward FFT, a pointwise product and an inverse FFT give an error of
#: O(u log2 L) (||x||_2 ||w||_1 + ||x||_1 ||w||_2) <= O(u log2 L) sqrt(n) ||x||_2 ||w||_2
#: (n = elements of the larger operand), and ||x||_2 ||w||_2 <= the norm of
#: the FULL |x| conv |w| (squares of non-negative sums).  The full output is
#: needed: FFT error from large taps spreads into a same/valid window whose
#: own |x| conv |w| may be tiny.
FFT_C = 8.0

def is_exact_dtype(dtype):
    """Integers and bool are computed exactly (compared with ==)."""
    return np.dtype(dtype).kind in "biu"


def unit_roundoff(dtype):
    return UNIT_ROUNDOFF[np.dtype(dtype)][0]


def elementwise_bound(abs_conv, k, dtype):
    """``c*K*u*(|x| conv |w|)`` (+ final rounding, + a subnormal floor)."""
    dtype = np.dtype(dtype)
    u = unit_roundoff(dtype)
    ku = k * u
    gamma = ku / (1.0 - ku)
    c = ELEMENTWISE_C_COMPLEX if dtype.kind == "c" else ELEMENTWISE_C
    bound = c * gamma * np.abs(abs_conv)
    bound = bound + FINAL_ROUNDING.get(dtype, 0.0) * np.abs(abs_conv)
    return bound + k * _tiny(dtype)


def _tiny(dtype):
    """The smallest normal number of a floating dtype (bfloat16's from ml_dtypes)."""
    if dtype == BFLOAT16:
        import ml_dtypes
        return float(ml_dtypes.finfo(dtype).tiny)
    return float(np.finfo(dtype).tiny)


def rel_norm_error(y, y_ref, scale=None):
    """``||y - y_ref|| / ||scale||`` (Frobenius; ``scale`` defaults to y_ref).

    Pass ``scale = |x| conv |w|`` when outputs may cancel to ~0: the error
    of any summation scales with the magnitudes summed, not the result.
    """
    y = np.asarray(y, dtype=np.complex128)
    y_ref = np.asarray(y_ref, dtype=np.complex128)
    scale = y_ref if scale is None else np.asarray(scale)
    den = float(np.linalg.norm(np.abs(scale).ravel()))
    num = float(np.linalg.norm((y - y_ref).ravel()))
    if den == 0.0:
        return num
    return num / den


def assert_elementwise(y, y_ref, abs_conv, k, dtype, what=""):
    """Worst-case check for direct/gemm: every element within the bound."""
    assert y.shape == y_ref.shape, (what, y.shape, y_ref.shape)
    err = np.abs(np.asarray(y, dtype=np.complex128) - y_ref)
    bound = elementwise_bound(abs_conv, k, dtype)
    bad = ~(err <= bound)
    assert not bad.any(), (
        f"{what}: {bad.sum()} of {bad.size} elements exceed c*K*u*(|x| conv |w|) "
        f"(K={k}, dtype={np.dtype(dtype)}); worst err {err.max():.3g} vs bound "
        f"{bound.ravel()[np.argmax(err - bound)]:.3g}")


def fft_tolerance(n, length, dtype):
    u = unit_roundoff(dtype) + FINAL_ROUNDING.get(np.dtype(dtype), 0.0)
    return FFT_C * u * max(math.log2(max(length, 2)), 1.0) * math.sqrt(max(n, 1))


def assert_normwise(y, y_ref, full_abs_norm, n, length, dtype, what=""):
    """Typical-case check for FFT paths (elementwise is meaningless there):
    ``||y - y_ref|| <= fft_tolerance * ||full |x| conv |w|||``."""
    assert y.shape == y_ref.shape, (what, y.shape, y_ref.shape)
    err = rel_norm_error(y, y_ref, np.asarray(full_abs_norm))
    tol = fft_tolerance(n, length, dtype)
    assert err <= tol, f"{what}: relative norm error {err:.3g} > {tol:.3g} (n={n}, L={length})"


class Bounds:
    """Everything the checks need besides ``y`` and the reference.

    abs_conv : |x| conv |w| on the output grid (elementwise bound), K its
    reduction length; full_abs_norm : norm of the stride-1 FULL |x| conv |w|
    (FFT bound), n the larger operand's element count, length the FFT size.
    """

    def __init__(self, abs_conv, k, full_abs_norm, n, length):
        self.abs_conv, self.k = abs_conv, k
        self.full_abs_norm, self.n, self.length = float(full_abs_norm), n, length


def assert_matches_reference(y, y_ref, bounds, dtype, algorithm, what=""):
    """Exact for integer/bool dtypes; elementwise for tap sums; normwise for FFT.

    ``algorithm`` is ``"fft"``, a tap-sum method, or ``None`` when unknown
    (``auto``): then the FFT (weaker) bound applies.
    """
    dtype = np.dtype(dtype)
    assert y.dtype == dtype, (what, y.dtype, dtype)
    if is_exact_dtype(dtype):
        np.testing.assert_array_equal(y, y_ref.astype(dtype), err_msg=what)
    elif algorithm in (None, "fft", "auto"):
        assert_normwise(y, y_ref, bounds.full_abs_norm, bounds.n, bounds.length, dtype, what)
    else:
        assert_elementwise(y, y_ref, bounds.abs_conv, bounds.k, dtype, what)


def signal_bounds(a, b, mode, axes=None, correlate=False):
    """:class:`Bounds` for ``convolve/correlate(a, b, mode, axes=axes)``."""
    a_abs = np.abs(np.asarray(a).astype(np.complex128))
    b_abs = np.abs(np.asarray(b).astype(np.complex128))
    abs_conv = ref_convolve(a_abs, b_abs, mode, axes=axes, correlate=correlate)
    full = ref_convolve(a_abs, b_abs, "full", axes=axes)
    conv_axes = range(a_abs.ndim) if axes is None else [ax % a_abs.ndim for ax in np.atleast_1d(axes)]
    s1 = [a_abs.shape[i] for i in conv_axes]
    s2 = [b_abs.shape[i] for i in conv_axes]
    return Bounds(abs_conv, min(math.prod(s1), math.prod(s2)), np.linalg.norm(full.ravel()),
                  max(math.prod(s1), math.prod(s2)),
                  math.prod(p + q - 1 for p, q in zip(s1, s2)))


def conv_bounds(x, w, bias=None, **kw):
    """:class:`Bounds` for ``conv(x, w, bias, **kw)`` (explicit padding)."""
    kw = dict(kw)
    layout = kw.get("layout", "channels_first")
    akw = dict(kw, cval=abs(kw.get("cval", 0)))
    x_abs, w_abs = np.abs(np.asarray(x)), np.abs(np.asarray(w))
    abs_conv = ref_conv(x_abs, w_abs, None if bias is None else np.abs(bias), **akw)
    if layout == "channels_last":
        x_abs, w_abs = np.moveaxis(x_abs, -1, 1), np.moveaxis(w_abs, -1, 1)
    r = x_abs.ndim - 2
    ks = w_abs.shape[2:]
    dil = kw.get("dilation", 1)
    dil = (dil,) * r if np.isscalar(dil) else tuple(dil)
    pads = ((0, 0), (0, 0)) + explicit_pads(kw.get("padding", 0), r)
    mode = kw.get("padding_mode", "constant")
    extra = dict(constant_values=akw["cval"]) if mode == "constant" else {}
    xpad = np.pad(x_abs.astype(np.float64), pads, mode=mode, **extra)
    full = ref_conv(xpad, w_abs, padding=[(d * (k - 1),) * 2 for d, k in zip(dil, ks)],
                    dilation=dil, groups=kw.get("groups", 1))
    if bias is not None:    # the bias's addition rounds on the scale of |conv| + |bias|
        full = full + np.abs(np.asarray(bias)).reshape((1, -1) + (1,) * r)
    k = w_abs.shape[1] * math.prod(ks) + (bias is not None)
    n = max(xpad[0, 0].size * xpad.shape[1], w_abs.size)
    return Bounds(abs_conv, k, np.linalg.norm(full.ravel()), n, xpad[0, 0].size)


# --------------------------------------------------------------------------
# References
# --------------------------------------------------------------------------

def reference_dtype(*dtypes, exact=False):
    """float64/complex128 reference; ``exact`` gives Python ints (object)."""
    if exact:
        return np.dtype(object)
    if any(np.dtype(d).kind == "c" for d in dtypes):
        return np.dtype(np.complex128)
    return np.dtype(np.float64)


def _as_ref(a, dtype):
    a = np.asarray(a)
    if dtype == object:
        return np.array(a.tolist(), dtype=object).reshape(a.shape)
    return a.astype(dtype)


def ref_convolve(in1, in2, mode="full", axes=None, correlate=False, dtype=None):
    """scipy.signal.convolve/correlate semantics by an explicit tap loop.

    The full result is accumulated tap by tap into a zero array and then
    sliced for ``same`` (centred on in1) and ``valid`` (the fully
    overlapping part; inputs swapped when in2 covers in1, scipy gh-5897).
    Non-convolved axes broadcast (``fftconvolve(axes=)`` semantics).
    Raises ValueError where scipy does.
    """
    in1, in2 = np.asarray(in1), np.asarray(in2)
    dtype = reference_dtype(in1.dtype, in2.dtype) if dtype is None else np.dtype(dtype)
    a, b = _as_ref(in1, dtype), _as_ref(in2, dtype)
    if a.ndim == 0 and b.ndim == 0:
        return a * (np.conj(b) if correlate else b)
    if a.ndim != b.ndim:
        raise ValueError("ranks differ")
    nd = a.ndim
    axes = tuple(range(nd)) if axes is None else tuple(
        sorted(ax % nd for ax in np.atleast_1d(axes)))
    if correlate:
        b = np.flip(b, axis=axes)
        b = np.conj(b) if dtype.kind == "c" or dtype == object else b
    for ax in range(nd):
        if ax not in axes and a.shape[ax] != b.shape[ax] and 1 not in (a.shape[ax], b.shape[ax]):
            raise ValueError(f"batch axis {ax} does not broadcast")
    s1 = [a.shape[ax] for ax in axes]
    s2 = [b.shape[ax] for ax in axes]
    out_shape = [max(a.shape[ax], b.shape[ax]) for ax in range(nd)]
    for ax, n1, n2 in zip(axes, s1, s2):
        out_shape[ax] = n1 + n2 - 1
    full = np.zeros(out_shape, dtype=dtype)
    if dtype == object:
        full[...] = 0
    for tap in np.ndindex(*s2):
        bi = [slice(None)] * nd
        oi = [slice(None)] * nd
        for ax, t, n1 in zip(axes, tap, s1):
            bi[ax] = slice(t, t + 1)
            oi[ax] = slice(t, t + n1)
        full[tuple(oi)] += a * b[tuple(bi)]
    if mode == "full":
        return full
    sl = [slice(None)] * nd
    if mode == "same":
        for ax, n1, n2 in zip(axes, s1, s2):
            start = (n2 - 1) // 2
            sl[ax] = slice(start, start + n1)
        return full[tuple(sl)]
    if mode == "valid":
        if not (all(p >= q for p, q in zip(s1, s2)) or all(q >= p for p, q in zip(s1, s2))):
            raise ValueError("valid mode: neither input covers the other")
        for ax, n1, n2 in zip(axes, s1, s2):
            lo, hi = min(n1, n2), max(n1, n2)
            sl[ax] = slice(lo - 1, hi)
        # The full result is symmetric in the operands, so the window is the
        # same whichever input is larger (scipy's swap, gh-5897; for
        # correlate scipy's "reversed and conjugated" swapped result is
        # exactly this window).
        return full[tuple(sl)]
    raise ValueError(f"bad mode {mode!r}")


def valid_mode_rejects(shape1, shape2, mode, axes=None):
    """True when scipy's ``valid`` mode must raise: neither operand covers the
    other on the convolved axes (the one ValueError of well-formed operands)."""
    if mode != "valid" or len(shape1) == 0:
        return False
    nd = len(shape1)
    axes = range(nd) if axes is None else sorted({ax % nd for ax in np.atleast_1d(axes)})
    s1, s2 = [shape1[i] for i in axes], [shape2[i] for i in axes]
    return not (all(p >= q for p, q in zip(s1, s2)) or all(q >= p for p, q in zip(s1, s2)))


def explicit_pads(padding, ndim):
    """int / per-axis int / per-axis pairs -> ((before, after), ...)."""
    if isinstance(padding, (int, np.integer)):
        return ((int(padding), int(padding)),) * ndim
    out = []
    for p in padding:
        out.append((int(p), int(p)) if isinstance(p, (int, np.integer)) else tuple(map(int, p)))
    return tuple(out)


def ref_conv(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1,
             padding_mode="constant", cval=0, layout="channels_first", dtype=None):
    """Deep-learning cross-correlation by a tap loop over ``np.pad(x)``.

    For every group and kernel tap, the strided slice of the padded input
    under that tap is contracted with the tap's ``(C_out/G, C_in/G)``
    weights.  ``padding`` must be explicit (int, per-axis ints or pairs).
    """
    x, w = np.asarray(x), np.asarray(w)
    dtype = reference_dtype(x.dtype, w.dtype) if dtype is None else np.dtype(dtype)
    if layout == "channels_last":
        x, w = np.moveaxis(x, -1, 1), np.moveaxis(w, -1, 1)
    x, w = _as_ref(x, dtype), _as_ref(w, dtype)
    r = x.ndim - 2
    stride = (stride,) * r if np.isscalar(stride) else tuple(stride)
    dilation = (dilation,) * r if np.isscalar(dilation) else tuple(dilation)
    pads = ((0, 0), (0, 0)) + explicit_pads(padding, r)
    if padding_mode == "constant":
        xp = np.pad(x, pads, mode="constant", constant_values=cval)
    else:
        xp = np.pad(x, pads, mode=padding_mode)
    n, c = x.shape[:2]
    k, cg = w.shape[:2]
    kg = k // groups
    ks = w.shape[2:]
    o = [max((p - d * (kk - 1) - 1) // s + 1, 0)    # 0: the kernel does not fit
         for p, d, kk, s in zip(xp.shape[2:], dilation, ks, stride)]
    y = np.zeros((n, k) + tuple(o), dtype=dtype)
    if dtype == object:
        y[...] = 0
    for g in range(groups if y.size else 0):
        xg = xp[:, g * cg:(g + 1) * cg]
        for tap in np.ndindex(*ks):
            win = tuple(slice(t * d, t * d + s * (oo - 1) + 1, s)
                        for t, d, s, oo in zip(tap, dilation, stride, o))
            patch = xg[(slice(None), slice(None)) + win]          # (N, Cg, *O)
            wt = w[(slice(g * kg, (g + 1) * kg), slice(None)) + tap]  # (Kg, Cg)
            for kk in range(kg):
                for cc in range(cg):
                    y[:, g * kg + kk] += wt[kk, cc] * patch[:, cc]
    if bias is not None:
        y += _as_ref(bias, dtype).reshape((1, k) + (1,) * r)
    if layout == "channels_last":
        y = np.moveaxis(y, 1, -1)
    return y


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------

#: Magnitude of small-integer inputs per dtype (CUTLASS conv2d_testbed.h):
#: products of K terms stay exact while K*s**2 < 2**(mantissa bits).
SMALL_INT_SCALE = {"b": 1, "u": 3, "i": 3, "f": 3, "c": 3}


def small_ints(rng, shape, dtype, scale=None):
    """Integers in ``[-s, s]`` (``[0, s]`` unsigned, {0, 1} bool) as ``dtype``."""
    dtype = np.dtype(dtype)
    s = SMALL_INT_SCALE["f" if dtype == BFLOAT16 else dtype.kind] if scale is None else scale
    lo = 0 if dtype.kind in "bu" else -s
    a = rng.integers(lo, s + 1, size=shape)
    if dtype.kind == "c":
        a = a + 1j * rng.integers(-s, s + 1, size=shape)
    return a.astype(dtype)


def random_array(rng, shape, dtype):
    """Standard-normal data for floats/complex; small integers otherwise."""
    dtype = np.dtype(dtype)
    if is_exact_dtype(dtype):
        return small_ints(rng, shape, dtype)
    a = rng.standard_normal(shape)
    if dtype.kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


# --------------------------------------------------------------------------
# Dual run (CuPy's numpy_cupy_allclose, with scipy in numpy's place)
# --------------------------------------------------------------------------

#: scipy.signal only knows these; the engine's extra methods run scipy "direct".
SCIPY_METHODS = ("auto", "direct", "fft")


def dual_run(body, method="auto", accept_error=(ValueError,)):
    """Run ``body(signal_module, method)`` with scipy.signal and cupyconv.

    Returns ``(scipy_result, cupyconv_result)``, or ``None`` when both
    raised an ``accept_error`` exception of the same type.  One raising and
    the other not, or different types, fails the test.
    """
    import scipy.signal
    import cupyconv

    results = {}
    for name, mod, m in (("scipy", scipy.signal, method if method in SCIPY_METHODS else "direct"),
                         ("cupyconv", cupyconv, method)):
        try:
            results[name] = body(mod, m)
        except accept_error as exc:
            results[name] = exc
    s, c = results["scipy"], results["cupyconv"]
    s_err, c_err = isinstance(s, Exception), isinstance(c, Exception)
    if s_err or c_err:
        assert s_err and c_err, f"only one raised: scipy={s!r}, cupyconv={c!r}"
        assert type(s) is type(c), f"scipy raised {s!r} but cupyconv raised {c!r}"
        return None
    return s, c


class FakeCupyArray:
    """Looks like a CuPy array to ``cupyconv``'s device check, no GPU needed."""

    __module__ = "cupy._core.core"

    def __init__(self, shape=(4,), dtype=np.float64):
        self.shape, self.dtype, self.ndim = tuple(shape), np.dtype(dtype), len(shape)
        self.flags = np.empty(0).flags          # writeable, like a fresh array's


def require_cuda():
    """``cupy`` when a CUDA device works here, else skip with the library's own reason
    (the probe of ``cupyconv.dispatch.backends``, the one place a backend is resolved)."""
    import pytest
    from cupyconv.dispatch.backends import backend_reasons
    why = backend_reasons()["cuda"]
    if why is not None:
        pytest.skip(f"no usable CUDA device: {why}")
    import cupy
    return cupy


def forget_launches(seen=None):
    """Empty ``seen`` (a spy's list of launches) and forget the memoised launch programs and
    compiled calls, so that the next call builds its launches again and a spy on
    ``launch.kernel_for`` sees them (a cached program or compiled call reuses its kernels)."""
    from cupyconv._kernels import launch, relayout_launch
    from cupyconv.api import compiled
    from cupyconv.backends import fft_conv
    from cupyconv.backends.cuda import algorithms, gradients, separable, winograd
    if seen is not None:
        del seen[:]
    launch.clear_program_cache()
    relayout_launch.clear_program_cache()
    winograd.clear_program_cache()
    algorithms.clear_program_cache()
    gradients.clear_program_cache()
    separable.clear_program_cache()
    fft_conv.clear_program_cache()
    compiled.clear_cache()


def gradient_cases(x, w, dy, w_transpose, groups, **geo):
    """The three gradient-style calls of one layer, as ``call(x, w, dy, **kw)`` functions:
    ``conv_grad_input(dy, w)``, ``conv_grad_weight(x, dy)`` and ``conv_transpose(x,
    w_transpose)`` (``groups`` and ``geo`` as given), with their float64 references and the
    same calls on the magnitudes (the scale of their summation error).

    Returns
    -------
    list of (call, reference, scale)
    """
    import cupyconv
    kw = dict(geo, groups=groups)
    calls = [
        lambda x_, w_, dy_, wt_, **o: cupyconv.conv_grad_input(dy_, w_, x.shape, **kw, **o),
        lambda x_, w_, dy_, wt_, **o: cupyconv.conv_grad_weight(x_, dy_, w.shape, **kw, **o),
        lambda x_, w_, dy_, wt_, **o: cupyconv.conv_transpose(x_, wt_, groups=groups, **o),
    ]
    wide = [np.asarray(a).astype(np.float64) for a in (x, w, dy, w_transpose)]
    with cupyconv.use_backend("numpy"):
        return [(c, c(*wide), c(*[np.abs(a) for a in wide])) for c in calls]


def in_threads(work, n=8):
    """Run ``work(t)`` for ``t`` in ``range(n)`` on ``n`` threads started together (a
    barrier); returns what they raised or appended to the list ``work`` returns (the
    failures), empty when every thread agreed with its reference."""
    import threading
    errors, barrier = [], threading.Barrier(n)

    def run(t):
        try:
            barrier.wait()
            errors.extend(work(t) or ())
        except Exception as exc:  # noqa: BLE001 - reported to the caller
            errors.append(exc)
    threads = [threading.Thread(target=run, args=(t,)) for t in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def called_twice(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` made twice, so that its key compiles: the first call with a
    key runs the normal path and notes the key, the second records and compiles
    (:mod:`cupyconv.api.compiled`).  Returns the second call's result."""
    fn(*args, **kwargs)
    return fn(*args, **kwargs)


@contextlib.contextmanager
def normal_path():
    """Inside the block every call takes the normal path (``config.compiled_calls`` off):
    the reference a compiled call must equal bit for bit."""
    from cupyconv import config
    saved = config.compiled_calls
    config.compiled_calls = False
    try:
        yield
    finally:
        config.compiled_calls = saved


def alternate_against_the_normal_path(dev, name, calls, rounds=3):
    """Run ``calls`` (alternating keys) ``rounds`` times in turn: each result must equal
    its normal path's, bit for bit (no call ever replays another key's program)."""
    with dev.scope():
        with normal_path():
            refs = [dev.to_host(c()).copy() for c in calls]
        for _ in range(rounds):
            for c, ref in zip(calls, refs):
                np.testing.assert_array_equal(dev.to_host(c()), ref, err_msg=name)


def first_and_repeated(dev, call):
    """``(normal path's result, first call's counts, repeated call's counts, repeated
    call's result)`` of ``call`` (the accounting stand-in's counters, host arrays); the
    repeated call is the third (the second records and compiles)."""
    from cupyconv._kernels import program
    with dev.scope():
        with normal_path():
            ref = dev.to_host(call())
        with program.accounting() as first:
            call()
        call()
        with program.accounting() as again:
            y = call()
    return ref, first, again, dev.to_host(y)


def spy_kernels(monkeypatch):
    """A list that collects ``(family, tile)`` of every kernel ``launch.kernel_for``
    fetches from now on (the launchers' choices; memoised programs are forgotten first,
    since one would not fetch its kernel again)."""
    from cupyconv._kernels import launch
    forget_launches()
    taken = []
    real = launch.kernel_for

    def spy(module, family, dt, rank, index64, tile):
        taken.append((family, tuple(tile)))
        return real(module, family, dt, rank, index64, tile)
    monkeypatch.setattr(launch, "kernel_for", spy)
    return taken


def device_check_steps():
    """``{name: (limit seconds, command)}`` of ``scripts/device_check.sh``'s steps, and the
    script's text."""
    import re
    from pathlib import Path
    script = (Path(__file__).resolve().parents[1] / "scripts" / "device_check.sh").read_text()
    steps = {name: (int(limit), command) for name, limit, command in
             re.findall(r"^step (\S+) (\d+) (.*)$", script, flags=re.M)}
    return steps, script


def fresh_kernel_choices(monkeypatch):
    """The CUDA path's memoised kernel records (``cost.kernel_config_memo``: priced, printed by
    ``explain()`` and built for operands as a plan assumes them) kept in a memo of their
    own for the rest of the test: a test that replaces a decision of the cost model
    (``implicit_choice.relayout_pays``, ``weight_gradient_splits``, the tile) with
    ``monkeypatch`` sees no record made before and leaves none to later tests.  Call it
    after each such replacement."""
    import functools
    from cupyconv.backends.cuda import cost
    monkeypatch.setattr(cost, "kernel_config_memo",
                        functools.lru_cache(maxsize=512)(cost.kernel_config_memo.__wrapped__))
