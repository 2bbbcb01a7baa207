"""A fixed corpus of public calls: the algorithm each one ran and its result's bytes.

``python -m benchmarks.choice_corpus --write PATH`` records the corpus;
``python -m benchmarks.choice_corpus --check PATH`` runs it again and lists every call
whose algorithm or result bytes differ (exit status 1 when any does).

Record before a change to the dispatch layer and check after it: a refactoring that keeps
behaviour gives an identical corpus.  The calls cover every public entry point (``conv``
under ``auto`` and every explicit method, ``convolve``/``correlate``, ``fftconvolve``,
``oaconvolve``, the gradients, ``conv_transpose``, ``plan_conv``, ``ConvOperator``, ndimage
filters) on the NumPy backend and on the emulated CUDA path as an sm_80 device (the
emulator's nominal device) and as an sm_90 stand-in.  Compiled calls are off, so each call
takes the dispatcher; the algorithm is what the dispatcher returned.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import sys

import numpy as np

import cupyconv
import cupyconv.ndimage
from cupyconv.backends.cuda import CudaBackend
from cupyconv.backends.cuda.runners import StandInRunner
from cupyconv.dispatch import backends, dispatcher


@contextlib.contextmanager
def _recording(log):
    """Record the algorithm of every dispatched call into ``log``."""
    inner = dispatcher._run

    def recorded(*args, **kwargs):
        result, name = inner(*args, **kwargs)
        log.append(name)
        return result, name

    dispatcher._run = recorded
    try:
        yield
    finally:
        dispatcher._run = inner


@contextlib.contextmanager
def _platform(name):
    """``numpy``, ``sm80`` or ``sm90``: the backend the corpus's calls run on."""
    if name == "numpy":
        with cupyconv.use_backend("numpy"):
            yield
        return
    arch = {"sm80": 80, "sm90": 90}[name]
    backend = CudaBackend(StandInRunner(arch))
    saved = backends._emulated_backend
    backends._emulated_backend = lambda: backend
    try:
        with cupyconv.use_backend("emulated"):
            yield
    finally:
        backends._emulated_backend = saved


def _arrays():
    rng = np.random.default_rng(1234)

    def f(shape, dtype=np.float64):
        return rng.standard_normal(shape).astype(dtype)

    def i(shape, dtype=np.int32):
        return rng.integers(-5, 6, shape).astype(dtype)

    return dict(
        x=f((2, 3, 9, 8)), w=f((4, 3, 3, 3)), x32=f((2, 8, 10, 9), np.float32),
        w32=f((8, 8, 3, 3), np.float32), x1=f((1, 2, 40)), w1=f((4, 1, 5)),
        xh=f((1, 4, 8, 8), np.float16), wh=f((4, 4, 3, 3), np.float16),
        xi=i((1, 2, 7, 7)), wi=i((2, 2, 3, 3)), a=f((23, 19)), k=f((5, 4)),
        sep=np.outer([1.0, 2.0, 1.0], [1.0, 0.0, -1.0])[None, None],
        img=f((1, 1, 12, 11)), s1=f((300,)), k1=f((17,)), dy=f((2, 4, 9, 8)),
        dys=f((2, 4, 5, 4)), big=f((1, 1, 24, 24)), w5=f((1, 1, 5, 5)))


def calls(arrays):
    """``name -> thunk``: the corpus."""
    A = arrays
    c = cupyconv
    out = {}
    for method in ("auto", "direct", "implicit_gemm", "gemm", "fft", "winograd"):
        out[f"conv x*w pad1 {method}"] = lambda m=method: c.conv(A["x"], A["w"], padding=1,
                                                                 method=m)
        out[f"conv f32 stride2 {method}"] = lambda m=method: c.conv(
            A["x32"], A["w32"], stride=2, padding=1, method=m)
    for method in ("auto", "direct", "gemm", "fft"):
        out[f"conv 1-D dil2 {method}"] = lambda m=method: c.conv(A["x1"], A["w1"],
                                                                 dilation=2, groups=2,
                                                                 method=m)
        out[f"conv f16 {method}"] = lambda m=method: c.conv(A["xh"], A["wh"], padding=1,
                                                            method=m)
        out[f"conv int32 {method}"] = lambda m=method: c.conv(A["xi"], A["wi"], method=m)
    for method in ("auto", "separable", "direct"):
        out[f"conv separable {method}"] = lambda m=method: c.conv(A["img"], A["sep"],
                                                                  padding="same", method=m)
    out["conv reflect auto"] = lambda: c.conv(A["x"], A["w"], padding=1,
                                              padding_mode="reflect")
    out["conv 5x5 auto"] = lambda: c.conv(A["big"], A["w5"], padding=2)
    for mode in ("full", "same", "valid"):
        out[f"convolve {mode}"] = lambda m=mode: c.convolve(A["a"], A["k"], mode=m)
        out[f"correlate {mode}"] = lambda m=mode: c.correlate(A["a"], A["k"], mode=m)
    out["convolve 1-D long"] = lambda: c.convolve(A["s1"], A["k1"])
    out["fftconvolve"] = lambda: c.fftconvolve(A["a"], A["k"], mode="same")
    out["oaconvolve"] = lambda: c.oaconvolve(A["s1"], A["k1"])
    for method in ("auto", "gemm", "fft", "implicit_gemm", "winograd"):
        out[f"grad_input {method}"] = lambda m=method: c.conv_grad_input(
            A["dy"], A["w"], A["x"].shape, padding=1, method=m)
    for method in ("auto", "gemm", "fft", "implicit_gemm"):
        out[f"grad_weight {method}"] = lambda m=method: c.conv_grad_weight(
            A["x"], A["dy"], A["w"].shape, padding=1, method=m)
        out[f"grad_weight stride2 {method}"] = lambda m=method: c.conv_grad_weight(
            A["x"], A["dys"], A["w"].shape, stride=2, padding=1, method=m)
    out["conv_transpose auto"] = lambda: c.conv_transpose(A["dys"], A["w"], stride=2,
                                                          padding=1)
    out["plan_conv auto"] = lambda: c.plan_conv(A["x"].shape, A["w"].shape, np.float64,
                                                padding=1)(A["x"], A["w"])
    out["ConvOperator matvec"] = lambda: c.ConvOperator(A["k"], A["a"].shape).matvec(
        A["a"].ravel())
    out["ConvOperator.from_conv rmatvec"] = lambda: c.ConvOperator.from_conv(
        A["w"], A["x"].shape, padding=1).rmatvec(A["dy"].ravel())
    nd = cupyconv.ndimage
    out["gaussian_filter"] = lambda: nd.gaussian_filter(A["a"], 1.5)
    out["uniform_filter"] = lambda: nd.uniform_filter(A["a"], 3)
    out["sobel"] = lambda: nd.sobel(A["a"], axis=0)
    out["laplace"] = lambda: nd.laplace(A["a"])
    out["ndimage convolve"] = lambda: nd.convolve(A["a"], A["k"], mode="mirror")
    return out


def _digest(result):
    a = np.asarray(result)
    return f"{a.dtype.str}{a.shape} " + hashlib.sha256(np.ascontiguousarray(a).tobytes()
                                                        ).hexdigest()[:20]


def record(platforms=("numpy", "sm80", "sm90")):
    """``{"platform: call": [algorithms..., digest or error]}`` for the whole corpus."""
    rows = {}
    saved = cupyconv.config.compiled_calls
    cupyconv.config.compiled_calls = False
    try:
        for platform in platforms:
            if platform != "numpy" and "emulated" not in cupyconv.available_backends():
                continue
            with _platform(platform):
                for name, thunk in calls(_arrays()).items():
                    log = []
                    dispatcher.clear_cache()
                    with _recording(log):
                        try:
                            outcome = _digest(thunk())
                        except Exception as exc:    # a refusal is part of the behaviour
                            outcome = f"{type(exc).__name__}: {str(exc)[:120]}"
                    rows[f"{platform}: {name}"] = log + [outcome]
    finally:
        cupyconv.config.compiled_calls = saved
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", metavar="PATH")
    group.add_argument("--check", metavar="PATH")
    opts = ap.parse_args(argv)
    rows = record()
    if opts.write:
        with open(opts.write, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1, sort_keys=True)
        print(f"{len(rows)} calls recorded in {opts.write}")
        return 0
    with open(opts.check, encoding="utf-8") as fh:
        want = json.load(fh)
    diff = sorted(k for k in set(want) | set(rows) if want.get(k) != rows.get(k))
    for k in diff:
        print(f"{k}\n  before: {want.get(k)}\n  after:  {rows.get(k)}")
    print(f"{len(rows)} calls, {len(diff)} differ")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
