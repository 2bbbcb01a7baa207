"""The weight gradient's split-K on the GPU: unsplit against the cost model's split, same run
(issue 26 item 2).

``python -m benchmarks.splitk_gpu [--out DIR] [--budget SECONDS]``

Per layer (:data:`CASES`: the 3-D 64-channel layer the split is for, a 2-D one whose grid
may fill the device) and dtype (float32 FMA, TF32, float64): ``conv_grad_weight`` with
``method="implicit_gemm"`` at S = 1 and at the cost model's S
(``implicit_choice.weight_gradient_splits``), and ``method="gemm"`` (vol2col + cuBLAS), median
milliseconds (CUDA events, compiled calls), the split's speed-up, and its relative error
against the unsplit result (float roundoff: the summation order differs).  Writes
``splitk_gpu.json`` under ``--out``.  Prints nothing but a reason when CuPy sees no
device; never run by the tests (``tests/benchmarks/test_splitk_gpu.py`` checks the
device check runs it).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from .winograd_gpu import _device_reason

#: ``(label, x shape, w shape)``: padding 1, stride 1.
CASES = [("3-D N=4 64->64 32^3 3^3", (4, 64, 32, 32, 32), (64, 64, 3, 3, 3)),
         ("2-D N=32 64->64 56^2 3x3", (32, 64, 56, 56), (64, 64, 3, 3))]
#: ``(dtype, precision)``.
DTYPES = [("float32", "highest"), ("float32", "tf32"), ("float64", "highest")]


def _row(label, xs, ws, dtype, precision, budget):
    import cupy

    import cupyconv
    from cupyconv._bench.timing import time_cuda_or_note
    from cupyconv.api import compiled
    from cupyconv.backends.cuda import implicit_choice
    from cupyconv.core.problem import ConvProblem
    from cupyconv.dispatch import backend_for
    rng = np.random.default_rng(0)
    x = cupy.asarray(rng.standard_normal(xs).astype(dtype))
    dy = cupy.asarray(rng.standard_normal((xs[0], ws[0]) + xs[2:]).astype(dtype))
    problem = ConvProblem.create(x_shape=xs, w_shape=ws, padding=1, dtype=dtype,
                                 precision=precision, op="grad_weight")
    model = implicit_choice.weight_gradient_splits(problem, backend_for(cupy).device)
    real = implicit_choice.weight_gradient_splits
    row = dict(layer=label, dtype=dtype, precision=precision, splits=model)
    results = {}
    try:
        for name, splits, method in (("unsplit", 1, "implicit_gemm"),
                                     ("split", model, "implicit_gemm"), ("gemm", 1, "gemm")):
            implicit_choice.weight_gradient_splits = lambda *a, s=splits, **k: s
            compiled.clear_cache()

            def call(method=method):
                return cupyconv.conv_grad_weight(x, dy, ws, padding=1, method=method,
                                                 precision=precision)
            results[name] = call()
            t, note = time_cuda_or_note(call, budget)
            row[f"{name}_ms"] = None if t is None else round(t * 1e3, 4)
            if note:
                row[f"{name}_note"] = note
    finally:
        implicit_choice.weight_gradient_splits = real
        compiled.clear_cache()
    ref = results["unsplit"].astype(np.float64)
    row["split_rel_err"] = float(cupy.linalg.norm(results["split"] - ref) / cupy.linalg.norm(ref))
    if row.get("unsplit_ms") and row.get("split_ms"):
        row["speedup"] = round(row["unsplit_ms"] / row["split_ms"], 3)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.splitk_gpu")
    ap.add_argument("--out", help="write splitk_gpu.json into this folder")
    ap.add_argument("--budget", type=float, default=2.0, help="seconds per timing")
    opts = ap.parse_args(argv)
    why = _device_reason()
    if why:
        print(f"splitk_gpu: {why}")
        return 0
    rows = []
    print("| layer | dtype | S | unsplit ms | split ms | speed-up | gemm ms | split rel. err |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for label, xs, ws in CASES:
        for dtype, precision in DTYPES:
            r = _row(label, xs, ws, dtype, precision, opts.budget)
            rows.append(r)
            kind = dtype + (" tf32" if precision == "tf32" else "")
            print(f"| {label} | {kind} | {r['splits']} | {r.get('unsplit_ms')} | "
                  f"{r.get('split_ms')} | {r.get('speedup')} | {r.get('gemm_ms')} | "
                  f"{r['split_rel_err']:.1e} |", flush=True)
    if opts.out:
        with open(os.path.join(opts.out, "splitk_gpu.json"), "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
