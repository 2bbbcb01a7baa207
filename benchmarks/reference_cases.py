"""The reference cases on a GPU, against the peers, and the measured efficiencies.

``python -m benchmarks.reference_cases [--out DIR] [--budget SECONDS] [--no-save]``

Three cases from the kernels-at-speed issue, float32, each algorithm of ours that can
run it (``method=`` explicitly) and the peers, timed with CUDA events (medians after a
warm-up), in the same run:

1. a 256-channel 3x3 layer, N=32, 56x56 (2-D), and its 3-D version at 32^3 (N=4):
   PyTorch ``conv2d``/``conv3d`` (cuDNN, TF32 off);
2. a single-channel 256^3 * 5^3 ``convolve`` (same): ``cupyx.scipy.signal.convolve``
   and ``cupyx.scipy.ndimage.convolve``;
3. a 4-D 8->8 channel 24^4 * 3^4 ``conv``: no peer has a 4-D GPU convolution.

Each of our timings is also a fraction of the device's FP32 peak (counted FLOPs /
time / peak from :class:`~cupyconv.backends.cuda.runners.DeviceInfo`), and the
efficiency for which the cost model predicts it (:func:`~cupyconv.backends.cuda.cost.calibrate`:
each algorithm in its own model's terms, the FFT's transforms and channel mixing, not
the direct FLOP count).  The largest per efficiency entry over the cases is what the
GPU cost model then uses: it is written to :func:`cupyconv.backends.cuda.cost.efficiency_path` (unless
``--no-save``) and, with every timing, to ``DIR/reference_cases.json``.
Prints a table last.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

import cupyconv
from cupyconv.backends.cuda import cost, pricing
from cupyconv.core.problem import ConvProblem
from cupyconv.dispatch import backend_for

from cupyconv._bench.peers import cudnn_conv
from cupyconv._bench.timing import time_cuda_or_note

CASES = [
    # name, kind, x shape, w shape, geometry
    ("layer2d 256ch 56^2 3x3", "conv", (32, 256, 56, 56), (256, 256, 3, 3), dict(padding=1)),
    ("layer3d 256ch 32^3 3^3", "conv", (4, 256, 32, 32, 32), (256, 256, 3, 3, 3),
     dict(padding=1)),
    ("convolve 256^3 * 5^3", "signal", (256, 256, 256), (5, 5, 5), dict(mode="same")),
    ("conv4d 8->8 24^4 3^4", "conv", (2, 8, 24, 24, 24, 24), (8, 8, 3, 3, 3, 3),
     dict(padding=1)),
]
METHODS = ("direct", "implicit_gemm", "gemm", "fft", "winograd")


def case_problem(kind, xs, ws, geo):
    """The :class:`ConvProblem` of one of :data:`CASES`."""
    if kind == "signal":
        pads = tuple((k // 2, (k - 1) // 2) for k in ws)
        return ConvProblem.create(x_shape=(1, 1) + xs, w_shape=(1, 1) + ws, padding=pads,
                                  dtype="float32", flip=True)
    return ConvProblem.create(x_shape=xs, w_shape=ws, dtype="float32", **geo)


def _ours(cp, kind, x, w, geo, method):
    if kind == "signal":
        return lambda: cupyconv.convolve(x, w, method=method, **geo)
    return lambda: cupyconv.conv(x, w, method=method, **geo)


def _peers(cp, kind, x, w, geo):
    out = {}
    if kind == "signal":
        import cupyx.scipy.ndimage as cnd
        import cupyx.scipy.signal as csig
        out["cupyx.signal.convolve"] = lambda: csig.convolve(x, w, mode="same")
        out["cupyx.ndimage.convolve"] = lambda: cnd.convolve(x, w, mode="constant")
        return out
    peer = cudnn_conv(x, w, geo.get("padding", 0))
    if peer is not None:
        out["torch cuDNN (TF32 off)"] = peer
    return out


def save_efficiencies(device_name, best, merge=False):
    """Write ``best`` (algorithm -> measured fraction) to the cost model's file of the
    device, replacing it, or with ``merge`` updating the fractions already there; returns
    the path."""
    path = cost.efficiency_path(device_name)
    merged = {}
    if merge:
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
            merged = dict(data.get("efficiency") or {}) if isinstance(data, dict) else {}
        except (OSError, ValueError):
            pass
    merged.update(best)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(dict(device=device_name, efficiency=merged), fh, indent=1)
    return path


def device_options(name, budget, argv):
    """``(options, cupy, DeviceInfo)`` of a calibrating GPU benchmark ``name`` (``--out``,
    ``--budget`` seconds per timed callable, ``--no-save``), or ``None`` (said on stderr)
    without a CUDA device."""
    ap = argparse.ArgumentParser(prog=f"python -m benchmarks.{name}")
    ap.add_argument("--out", default=".")
    ap.add_argument("--budget", type=float, default=budget, help="seconds per timed callable")
    ap.add_argument("--no-save", action="store_true", help="do not write the cost model's file")
    opts = ap.parse_args(argv)
    if "cuda" not in cupyconv.available_backends():
        print(f"{name}: needs a CUDA device", file=sys.stderr)
        return None
    import cupy as cp
    return opts, cp, backend_for(cp).device


def main(argv=None):
    found = device_options("reference_cases", 20.0, argv)
    if found is None:
        return 2
    opts, cp, device = found
    peak = device.peak_flops(np.float32)
    rng = np.random.default_rng(0)
    rows, best = [], {}
    for name, kind, xs, ws, geo in CASES:
        x = cp.asarray(rng.standard_normal(xs, dtype=np.float32))
        w = cp.asarray(rng.standard_normal(ws, dtype=np.float32))
        problem = case_problem(kind, xs, ws, geo)
        flops = problem.flops
        timed = {f"cupyconv {m}": _ours(cp, kind, x, w, geo, m) for m in METHODS}
        timed.update(_peers(cp, kind, x, w, geo))
        for label, fn in timed.items():
            t0 = time.perf_counter()
            seconds, note = time_cuda_or_note(fn, opts.budget)
            frac = flops / seconds / peak if seconds else None
            rows.append(dict(case=name, who=label, seconds=seconds, peak_fraction=frac,
                             note=note, wall=time.perf_counter() - t0))
            if label.startswith("cupyconv ") and seconds:
                key, fitted = pricing.calibrate(problem, device, label.split()[1], seconds)
                if fitted is not None:
                    best[key] = max(best.get(key, 0.0), fitted)
            print(f"{name:<26} {label:<26} "
                  + (f"{seconds * 1e3:9.2f} ms  {frac:6.1%} of FP32 peak" if seconds
                     else f"   failed  {note}"), flush=True)
        del x, w
        cp.get_default_memory_pool().free_all_blocks()
    result = dict(device=device.name, arch=device.arch, fp32_peak=peak, efficiency=best,
                  rows=rows, date=time.strftime("%Y-%m-%d"))
    os.makedirs(opts.out, exist_ok=True)
    with open(os.path.join(opts.out, "reference_cases.json"), "w") as fh:
        json.dump(result, fh, indent=1)
    if not opts.no_save and best:
        print(f"efficiencies for the cost model: {save_efficiencies(device.name, best)}")
    print("\n| case | who | ms | % FP32 peak |\n|---|---|---:|---:|")
    for r in rows:
        ms = f"{r['seconds'] * 1e3:.2f}" if r["seconds"] else "failed"
        pct = f"{r['peak_fraction']:.1%}" if r["peak_fraction"] else ""
        print(f"| {r['case']} | {r['who']} | {ms} | {pct} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
