"""The tensor-core tiles on a GPU against cuDNN, and their measured efficiencies.

``python -m benchmarks.tensor_cores [--out DIR] [--budget SECONDS] [--no-save]``

Issue 12's cases, timed with CUDA events (medians after a warm-up) in the same run:

1. the reference layer N=32, C=K=256, 56x56, 3x3 (padding 1) and its 3-D version at
   32^3 (N=4), in float64 (ours: ``implicit_gemm`` on DMMA and ``gemm`` on cuBLAS;
   PyTorch/cuDNN float64), float32 with TF32 (ours ``precision="tf32"``; cuDNN with
   ``allow_tf32``) and float16 (ours native half; cuDNN float16);
2. a 4-D layer, N=2, C=K=32, 16^4, 3^4: no peer has a 4-D GPU convolution, let alone
   a tensor-core one.

Goals (issue 12): float64 >= 2x cuDNN float64, TF32 >= 0.9x cuDNN TF32, float16 >= 0.9x
cuDNN float16.  Each of our timings is also a fraction of the tensor-core peak
(:func:`cupyconv.backends.cuda.cost.tensor_peak_flops`); the efficiency for which the
cost model predicts each (:func:`~cupyconv.backends.cuda.cost.calibrate`), the largest
per entry, becomes the cost model's ``implicit_gemm_tc_*`` / ``gemm_tc_*`` efficiency, merged
into the device's efficiency file (unless ``--no-save``), and every row goes to
``DIR/tensor_cores.json``.  ``method="auto"`` is timed too: the ratio against cuDNN is
what a user gets (auto), with our fastest algorithm's in brackets; and the implicit GEMM
on the same data channels-last (the tensor-core tiles' 16-byte channel copies, tile
variant 3; not a calibration point).  Prints a table last.
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

import cupyconv
from cupyconv.backends.cuda import cost, pricing
from cupyconv.core.problem import ConvProblem

from cupyconv._bench.peers import cudnn_conv
from .reference_cases import device_options, save_efficiencies
from cupyconv._bench.timing import time_cuda_or_note

CASES = [   # name, x shape, w shape
    ("layer2d 256ch 56^2 3x3", (32, 256, 56, 56), (256, 256, 3, 3)),
    ("layer3d 256ch 32^3 3^3", (4, 256, 32, 32, 32), (256, 256, 3, 3, 3)),
    ("conv4d 32ch 16^4 3^4", (2, 32, 16, 16, 16, 16), (32, 32, 3, 3, 3, 3)),
]
#: label -> (dtype, precision, our methods, cuDNN TF32 switch)
KINDS = {
    "float64": ("float64", "highest", ("implicit_gemm", "gemm"), False),
    "tf32": ("float32", "tf32", ("implicit_gemm", "gemm"), True),
    "float16": ("float16", "highest", ("implicit_gemm", "gemm"), False),
}
GOALS = {"float64": 2.0, "tf32": 0.9, "float16": 0.9}


def main(argv=None):
    found = device_options("tensor_cores", 3.0, argv)
    if found is None:
        return 2
    opts, cp, device = found
    rng = np.random.default_rng(0)
    rows, best = [], {}
    for name, xs, ws in CASES:
        for kind, (dtype, precision, methods, tf32) in KINDS.items():
            x = cp.asarray(rng.standard_normal(xs).astype(dtype))
            w = cp.asarray(rng.standard_normal(ws).astype(dtype))
            problem = ConvProblem.create(x_shape=xs, w_shape=ws, padding=1, dtype=dtype,
                                         precision=precision)
            peak = cost.tensor_peak_flops(problem, device)
            timed = {f"cupyconv {m}": (lambda m=m: cupyconv.conv(
                x, w, padding=1, method=m, precision=precision)) for m in ("auto",) + methods}
            # the same data channels-last: the tiles' 16-byte channel copies (variant 3)
            xl = cp.ascontiguousarray(cp.moveaxis(x, 1, -1))
            wl = cp.ascontiguousarray(cp.moveaxis(w, 1, -1))
            timed["cupyconv implicit_gemm channels_last"] = lambda: cupyconv.conv(
                xl, wl, padding=1, method="implicit_gemm", precision=precision,
                layout="channels_last")
            try:
                peer = cudnn_conv(x, w, 1, tf32)
            except Exception as exc:  # noqa: BLE001 - a peer that cannot start is recorded
                peer = None
                rows.append(dict(case=name, kind=kind, who="cuDNN", seconds=None, tc_fraction=None,
                                 note=f"{type(exc).__name__}: {exc}"[:120], wall=0.0))
            if peer is not None:
                timed["cuDNN"] = peer
            seconds = {}
            for label, fn in timed.items():
                t0 = time.perf_counter()
                s, note = time_cuda_or_note(fn, opts.budget)
                seconds[label] = s
                frac = problem.flops / s / peak if s and peak else None
                rows.append(dict(case=name, kind=kind, who=label, seconds=s, tc_fraction=frac,
                                 note=note, wall=time.perf_counter() - t0))
                if label.startswith("cupyconv ") and len(label.split()) == 2 and s \
                        and label != "cupyconv auto":
                    key, fitted = pricing.calibrate(problem, device, label.split()[1], s)
                    if fitted is not None and "_tc_" in key:
                        best[key] = max(best.get(key, 0.0), fitted)
                print(f"{name:<24} {kind:<8} {label:<24} "
                      + (f"{s * 1e3:9.2f} ms" + (f"  {frac:6.1%} of tensor peak" if frac else "")
                         if s else f"   failed  {note}"), flush=True)
            ours = [v for k, v in seconds.items() if k.startswith("cupyconv ") and v]
            if seconds.get("cupyconv auto") and seconds.get("cuDNN"):
                # what a user gets (method="auto"), and our fastest algorithm
                rows[-1]["speedup_vs_cudnn"] = seconds["cuDNN"] / seconds["cupyconv auto"]
                rows[-1]["best_vs_cudnn"] = seconds["cuDNN"] / min(ours)
            x = w = xl = wl = timed = peer = None      # free the operands before the next kind
            cp.get_default_memory_pool().free_all_blocks()
    result = dict(device=device.name, arch=device.arch, efficiency=best, goals=GOALS, rows=rows,
                  date=time.strftime("%Y-%m-%d"))
    os.makedirs(opts.out, exist_ok=True)
    with open(os.path.join(opts.out, "tensor_cores.json"), "w") as fh:
        json.dump(result, fh, indent=1)
    if not opts.no_save and best:
        print(f"efficiencies for the cost model: "
              f"{save_efficiencies(device.name, best, merge=True)}")
    print("\n| case | kind | who | ms | % tensor peak | cuDNN / auto (best; goal) |\n"
          "|---|---|---|---:|---:|---:|")
    for r in rows:
        ms = f"{r['seconds'] * 1e3:.2f}" if r["seconds"] else "failed"
        pct = f"{r['tc_fraction']:.1%}" if r["tc_fraction"] else ""
        ratio = (f"{r['speedup_vs_cudnn']:.2f}x ({r['best_vs_cudnn']:.2f}x; {GOALS[r['kind']]}x)"
                 if "speedup_vs_cudnn" in r else "")
        print(f"| {r['case']} | {r['kind']} | {r['who']} | {ms} | {pct} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
