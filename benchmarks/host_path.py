"""Host time of the CUDA path's own Python, per call, measured without a GPU.

``python -m benchmarks.host_path [--rounds N] [--json PATH] [--baseline REF [--alternations K]]``

The GPU runs showed small calls bound by host time (0.25-1.5 ms a call against
kernels of microseconds).  Part of it is CuPy's (allocations, launches, copies:
only a GPU shows those, ``benchmarks.profile_call --backend cuda``); the rest is
the orchestration this project writes, which is the same code on the emulated
runner.  This benchmark runs that orchestration on the emulated runner with every
kernel launch stubbed out (counted, not run), so what it times is the planning,
dispatch and launch preparation alone, and it counts what each call asks of the
device: kernel launches, GEMMs and workspace allocations.

Per case, in one run: *today's path* (``cupyconv.config.compiled_calls = False``: the
dispatcher on every call), a *first call* with a key the compiled-call cache has not seen
(the normal path, the key noted), a *second call* with it (the normal path plus recording
and compiling), and a *repeated* call (the compiled call when the case compiles, else the
normal path, with the reason); host microseconds (the median over ``--rounds`` of
``timeit``'s autorange mean; first and second calls: the median of single calls, five
per round, at least 15), and per call the launches and GEMMs
(stubbed) and the allocations, synchronisations and copies each way of
``cupyconv._kernels.program.accounting``.  NumPy data of the shapes the GPU benchmarks
use, plus two planned layers.

A *first call, choice unmade* is a first call with the dispatcher's choices forgotten
as well (``dispatch.dispatcher.clear_cache``): the chooser prices the candidates again,
as on a call of a new signature (the memoised problems and programs stay warm).

``--baseline REF`` also times the first calls (both kinds), the second and the repeated
calls with cupyconv as of git ``REF`` (its ``cupyconv`` and ``cuda_src`` in a temporary
directory,
run by this same benchmark file in a subprocess, so both sides have the same cases and
stubs), the two sides taking turns ``--alternations`` times; each side's figure is the
median of its turns, and the table gains the baseline's columns and the ratios (a loaded
machine moves both alike).
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import timeit

import numpy as np

import cupyconv
import cupyconv.ndimage
from cupyconv._emulation import EmulatedFunction
from cupyconv._kernels import program
from cupyconv.api import compiled
from cupyconv.backends.cuda import runners
from cupyconv.dispatch import dispatcher

from .baseline_tree import baseline_tree


def gaussian_4d():
    """The 7^4 float32 Gaussian (sigma 1, radius 3) of issue 13's separable case."""
    from cupyconv.ndimage.filters import gaussian_kernel1d
    g = gaussian_kernel1d(1.0, 0, 3)
    return np.einsum("i,j,k,l->ijkl", g, g, g, g).astype(np.float32)


def gaussian_2d(channels=None):
    """The 7x7 float32 Gaussian (sigma 1, radius 3); ``(channels, 1, 7, 7)`` depthwise."""
    from cupyconv.ndimage.filters import gaussian_kernel1d
    g = gaussian_kernel1d(1.0, 0, 3)
    k = np.outer(g, g).astype(np.float32)
    return k if channels is None else np.repeat(k[None, None], channels, axis=0)


def small_calls(xp):
    """``{name: zero-argument call}`` on arrays of ``xp``: the small calls the GPU runs
    found bound by host time (timed here on NumPy arrays, on CuPy arrays by
    ``benchmarks.profile_call``)."""
    rng = np.random.default_rng(0)

    def arr(*shape):
        return xp.asarray(rng.standard_normal(shape).astype(np.float32))

    x2, w2 = arr(4, 16, 32, 32), arr(32, 16, 3, 3)
    a, k = arr(256, 256), arr(3, 3)
    v4, k4 = arr(24, 24, 24, 24), arr(3, 3, 3, 3)
    v, v96, k5 = arr(32, 32, 32), arr(96, 96, 96), arr(5, 5, 5)
    big, gauss = arr(40, 40, 40, 40), xp.asarray(gaussian_4d())
    x3, w3 = arr(1, 48, 14, 14, 14), arr(48, 48, 3, 3, 3)
    gauss2, a32, k5x5 = xp.asarray(gaussian_2d()), arr(32, 32), arr(5, 5)
    nd = cupyconv.ndimage
    calls = {
        "conv 2-D N4 16->32 32^2 3x3 (auto)": lambda: cupyconv.conv(x2, w2, padding=1),
        "conv 2-D same, implicit_gemm": lambda: cupyconv.conv(x2, w2, padding=1,
                                                              method="implicit_gemm"),
        "convolve 256^2 * 3x3 same (auto)": lambda: cupyconv.convolve(a, k, "same"),
        "ndimage.correlate 24^4 * random 3^4": lambda: nd.correlate(v4, k4),
        # issue 13: three 1-D passes, the ndimage path's own overhead
        "ndimage.gaussian_filter 32^3 s=1.5": lambda: nd.gaussian_filter(v, 1.5),
        # issue 13: the H200 table had this call at 1.84 ms against cupyx's 0.10 ms
        "ndimage.correlate 96^3 * random 5^3": lambda: nd.correlate(v96, k5),
        "convolve 40^4 * 7^4 Gaussian (separable)": lambda: cupyconv.convolve(
            big, gauss, "same", method="separable"),
        # issue 24: a separable kernel small enough (<= compiled.HOST_VALUE_BYTES) for
        # the key to keep its bytes, so a repeated call replays its two passes
        "convolve 256^2 * 7x7 Gaussian same, separable": lambda: cupyconv.convolve(
            a, gauss2, "same", method="separable"),
        # issue 24: fft as a program; on NumPy data the transforms themselves (pocketfft)
        # are in these figures, so the case is small: 36^2-point transforms
        "fftconvolve 32^2 * 5x5 same": lambda: cupyconv.fftconvolve(a32, k5x5, "same"),
        "convolve 32^2 * 5x5 same, fft": lambda: cupyconv.convolve(a32, k5x5, "same",
                                                                   method="fft"),
        # issue 15: Winograd's small layers took 1.4-2.5 ms a call
        "conv 3-D 48->48 14^3 3^3, winograd": lambda: cupyconv.conv(x3, w3, padding=1,
                                                                   method="winograd"),
    }
    if xp is not np:   # on NumPy the transforms are the host's own work, not overhead
        v64, k9 = arr(64, 64, 64), arr(9, 9, 9)
        # one n-D cuFFT call per transform below fft.DEVICE_PRUNE_POINTS (untimed so far)
        calls["convolve 64^3 * 9^3 same, fft"] = lambda: cupyconv.convolve(
            v64, k9, "same", method="fft")
    return calls


@contextlib.contextmanager
def stubbed(counts):
    """Kernel launches and GEMMs counted, not run (the result buffer of a GEMM without
    ``out`` is allocated); workspace allocations counted."""
    # the class attributes themselves (``matmul`` is a staticmethod object)
    launch = EmulatedFunction.__dict__["__call__"]
    matmul, workspace = (runners.EmulatedRunner.__dict__[k] for k in ("matmul", "workspace"))

    def fake_launch(self, grid, block, args, shared_mem=0):   # RawKernel's signature
        counts["launches"] += 1

    def fake_matmul(a, b, out=None, precision="highest"):
        counts["gemms"] += 1
        shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
        return out if out is not None else np.empty(shape, np.result_type(a, b))

    def fake_workspace(self, shape, dtype):
        counts["workspace"] += 1
        return workspace(self, shape, dtype)

    EmulatedFunction.__call__ = fake_launch
    runners.EmulatedRunner.matmul = staticmethod(fake_matmul)
    runners.EmulatedRunner.workspace = fake_workspace
    try:
        yield
    finally:
        EmulatedFunction.__call__ = launch
        runners.EmulatedRunner.matmul = matmul
        runners.EmulatedRunner.workspace = workspace


_PLANS = []


def planned_calls():
    """``{name: call}`` of planned layers (``plan(x, w)``): the plan's own compiled cache."""
    rng = np.random.default_rng(1)
    x2 = rng.standard_normal((4, 16, 32, 32)).astype(np.float32)
    w2 = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    x3 = rng.standard_normal((1, 48, 14, 14, 14)).astype(np.float32)
    w3 = rng.standard_normal((48, 48, 3, 3, 3)).astype(np.float32)
    direct = cupyconv.plan_conv(x2.shape, w2.shape, np.float32, padding=1, backend="emulated")
    wino = cupyconv.plan_conv(x3.shape, w3.shape, np.float32, padding=1, method="winograd",
                              backend="emulated")
    xd, wd = rng.standard_normal((1, 8, 64, 64)).astype(np.float32), gaussian_2d(8)
    sep = cupyconv.plan_conv(xd.shape, wd.shape, np.float32, padding=3, groups=8,
                             method="separable", backend="emulated")
    xf = rng.standard_normal((1, 4, 24, 24)).astype(np.float32)
    wf = rng.standard_normal((4, 4, 5, 5)).astype(np.float32)
    fft = cupyconv.plan_conv(xf.shape, wf.shape, np.float32, padding=2, method="fft",
                             backend="emulated")
    _PLANS[:] = [direct, wino, sep, fft]
    return {f"plan(x, w) 2-D N4 16->32 32^2 3x3 ({direct.algorithm})": lambda: direct(x2, w2),
            "planned winograd layer 3-D 48->48 14^3 3^3": lambda: wino(x3, w3),
            "planned separable depthwise 8x64^2 * 7x7 Gaussian": lambda: sep(xd, wd),
            "planned fft 2-D 4->4 24^2 5x5 (28^2-point transforms)": lambda: fft(xf, wf)}


def _per_call(fn, rounds):
    samples = []
    for _ in range(rounds):
        n, _ = timeit.Timer(fn).autorange()
        samples.append(timeit.Timer(fn).timeit(n) / n)
    return 1e6 * statistics.median(samples)


def _first_call(fn, rounds, choices=False, before=0):
    """Host us of a call whose key is new (the dispatcher's caches and modules warm):
    the normal path (since the compiled calls' cache notes a key on its first call and
    compiles on its second; before that, the normal path plus recording and compiling);
    ``choices``: the dispatcher's choices forgotten too, so the chooser prices the
    candidates again (as on a new signature; the memoised problems and launch programs
    stay warm); ``before``: calls made untimed after the reset (1: the second call's
    time, which records and compiles)."""
    samples = []
    for _ in range(max(5 * rounds, 15)):        # single calls: noisier than autorange's
        _reset()
        if choices:
            dispatcher.clear_cache()
        for _ in range(before):
            fn()
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return 1e6 * statistics.median(samples)


#: what each row counts per call: the emulator's launches and GEMMs (stubbed) and the
#: call-accounting counters of ``cupyconv._kernels.program.accounting``.
COUNTED = ("launches", "gemms", "allocations", "syncs", "d2h", "h2d")


def _counts(fn, counts):
    counts.clear()
    with program.accounting() as acc:
        fn()
    return dict(launches=counts["launches"], gemms=counts["gemms"],
                allocations=acc["allocations"], syncs=acc["syncs"], d2h=acc["d2h"],
                h2d=acc["h2d"])


def measure(rounds):
    """Rows of per-call host time and counts: today's path (``config.compiled_calls``
    off), a first call with a new key, its second call and a repeated (compiled) call,
    in one run."""
    rows = []
    counts = collections.Counter()
    saved = cupyconv.config.compiled_calls
    with cupyconv.use_backend("emulated"), stubbed(counts):
        calls = dict(small_calls(np))
        calls.update(planned_calls())
        try:
            for name, fn in calls.items():
                cupyconv.config.compiled_calls = False
                fn()                              # plans, choices and modules cached
                today = _counts(fn, counts)
                today_us = _per_call(fn, rounds)
                cupyconv.config.compiled_calls = True
                first_us = _first_call(fn, rounds)
                chosen_us = _first_call(fn, rounds, choices=True)
                second_us = _first_call(fn, rounds, before=1)
                fn()
                fn()
                again = _counts(fn, counts)
                rows.append(dict(case=name, today_us=today_us, first_us=first_us,
                                 chosen_us=chosen_us, second_us=second_us,
                                 repeated_us=_per_call(fn, rounds),
                                 today=today, repeated=again, path=_path()))
        finally:
            cupyconv.config.compiled_calls = saved
    return rows


def _reset():
    """Forget every compiled call (the process-wide cache and the plans' own)."""
    compiled.clear_cache()
    for plan in _PLANS:
        plan.__dict__.pop("_compiled", None)


def _path():
    """The one case's compiled-call entry after :func:`_reset` and its calls: "compiled"
    with its launches, or the reason it takes the normal path."""
    entries = compiled._cache.values() + [e for p in _PLANS if "_compiled" in p.__dict__
                                          for e in p.__dict__["_compiled"].values()]
    if not entries:
        return "normal path: the key cannot hold the call"
    entry = entries[0]
    if isinstance(entry, compiled.CompiledCall):
        return "compiled"
    return f"normal path: {entry.reason}"


def _fmt(c):
    return (f"{c['launches']} | {c['gemms']} | {c['allocations']} | {c['syncs']} | "
            f"{c['d2h']}/{c['h2d']}")


def _baseline_tree(ref):
    """``(directory, short commit)``: git ``ref``'s ``cupyconv`` and ``cuda_src`` with
    this checkout's ``benchmarks`` beside them (the same cases and stubs on both sides)."""
    tree, commit = baseline_tree(ref, prefix="cupyconv-host-path-")
    shutil.copytree(os.path.dirname(os.path.abspath(__file__)), os.path.join(tree, "benchmarks"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    return tree, commit


def _baseline_rows(tree, rounds):
    """:func:`measure` of the baseline's package, in a subprocess run from ``tree``."""
    out = os.path.join(tree, "rows.json")
    subprocess.run([sys.executable, "-m", "benchmarks.host_path", "--rounds", str(rounds),
                    "--json", out], cwd=tree, env=dict(os.environ, PYTHONPATH=tree),
                   check=True, stdout=subprocess.DEVNULL)
    with open(out) as fh:
        return json.load(fh)


#: The timed columns of a row: today's path, a first call (its choice made, then
#: unmade), a second call and a repeated call; and the baseline's columns' names.
TIMED = ("today_us", "first_us", "chosen_us", "second_us", "repeated_us")
LABELS = dict(first_us="first", chosen_us="first, choice unmade", second_us="second",
              repeated_us="repeated")


def _median_rows(turns):
    """One row per case: the first turn's, its times the medians over the turns."""
    rows = [dict(r) for r in turns[0]]
    for i, row in enumerate(rows):
        for k in TIMED:
            row[k] = statistics.median(t[i][k] for t in turns)
    return rows


def table(rows, base=None, commit=None):
    """The Markdown table's lines; with ``base`` (``case -> row`` of the baseline
    ``commit``), its first calls (both kinds), second and repeated calls beside ours, and
    the ratios ours / theirs."""
    compared = TIMED[1:]
    extra = "".join(f" {commit} {LABELS[k]} us | ratio |" for k in compared) if base else ""
    lines = ["| call | today us | first call us | first call, choice unmade us | second call "
             "us | repeated us | path of a repeated call | today: launches, GEMMs, "
             "allocations, syncs, copies d2h/h2d | repeated: the same |" + extra,
             "|---|---:|---:|---:|---:|---:|---|---|---|" + ("---:|---:|" * len(compared)
                                                            if base else "")]
    for r in rows:
        cells = ""
        if base and r["case"] in base:
            b = base[r["case"]]
            cells = "".join(f" {b[k]:.1f} | {r[k] / b[k]:.2f} |" if k in b else " | |"
                            for k in compared)
        lines.append(f"| {r['case']} | {r['today_us']:.1f} | {r['first_us']:.1f} | "
                     f"{r['chosen_us']:.1f} | {r['second_us']:.1f} | "
                     f"{r['repeated_us']:.1f} | {r['path']} | "
                     f"{_fmt(r['today'])} | {_fmt(r['repeated'])} |" + cells)
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.host_path", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--baseline", help="git commit whose first and repeated calls to time "
                    "as well")
    ap.add_argument("--alternations", type=int, default=2,
                    help="turns each side takes with --baseline")
    opts = ap.parse_args(argv)
    base = None
    if opts.baseline:
        tree, commit = _baseline_tree(opts.baseline)
        try:
            ours, theirs = [], []
            for _ in range(opts.alternations):
                theirs.append(_baseline_rows(tree, opts.rounds))
                ours.append(measure(opts.rounds))
        finally:
            shutil.rmtree(tree, ignore_errors=True)
        rows, base = _median_rows(ours), {r["case"]: r for r in _median_rows(theirs)}
    else:
        rows = measure(opts.rounds)
    print("\n".join(table(rows, base, commit if base else None)))
    if opts.json:
        with open(opts.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
