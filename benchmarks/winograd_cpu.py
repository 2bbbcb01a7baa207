"""The ``winograd`` algorithm on the CPU against ``gemm``, ``fft`` and ``direct``, same run.

``python -m benchmarks.winograd_cpu [--rounds 3] [--small]``

Per case (issue 15's layers, NumPy arrays): the tiles the gate chose (the last axis's
alone where the NumPy backend runs ``winograd`` along it,
``cupyconv/backends/numpy/winograd_axis.py``), the multiplications saved (direct's per
output over Winograd's), the workspace, the measured error of each
algorithm relative to a float64 ``direct`` reference (RMS) and as a ratio to direct's, and
(float64: to gemm's, since direct is the reference), and
the median milliseconds of ``winograd``, ``gemm``, ``fft`` and ``auto`` (which it ran).
``--small`` halves every spatial extent (a quick run).
"""
from __future__ import annotations

import argparse
import math

import numpy as np

from cupyconv._bench.timing import time_cpu

#: (name, x shape, w shape, dtype)
CASES = [
    ("3-D 3^3 C=K=48, 28^3", (1, 48, 28, 28, 28), (48, 48, 3, 3, 3), "float32"),
    ("3-D 3^3 C=K=64, 32^3", (1, 64, 32, 32, 32), (64, 64, 3, 3, 3), "float32"),
    ("3-D 3^3 C=K=64, 32^3 f64", (1, 64, 32, 32, 32), (64, 64, 3, 3, 3), "float64"),
    ("4-D 3^4 C=K=16, 16^4", (1, 16, 16, 16, 16, 16), (16, 16, 3, 3, 3, 3), "float32"),
    ("2-D 3x3 C=K=128, 56^2", (1, 128, 56, 56), (128, 128, 3, 3), "float32"),
    ("2-D 3x3 C=K=128, 56^2 f64", (1, 128, 56, 56), (128, 128, 3, 3), "float64"),
]


def case_inputs(xs, ws, dtype, small):
    """``(x, w, problem)`` of one case ("same" padding; ``small`` halves the extents)."""
    from cupyconv.core import ConvProblem
    if small:
        xs = xs[:2] + tuple(max(s // 2, 4) for s in xs[2:])
    rng = np.random.default_rng(0)
    x = rng.standard_normal(xs).astype(dtype)
    w = (rng.standard_normal(ws) / math.sqrt(math.prod(ws[1:]))).astype(dtype)
    return x, w, ConvProblem.create(x_shape=xs, w_shape=ws, padding="same", dtype=np.dtype(dtype))


def planned_tile(problem, max_alpha=None):
    """``{"tile": ...}`` of the first piece's planned Winograd tile (None when no tile
    passes the gate), with ``"mult_saved"``: the multiplications it saves against a direct
    tap sum, prod(m * r / (m + r - 1)) over the axes."""
    from cupyconv.backends.winograd_conv import plan_tiles
    plan = plan_tiles(problem, max_alpha)
    if isinstance(plan, str):
        return dict(tile=None)
    tile = plan[0][1]
    return dict(tile=tile, mult_saved=math.prod(
        m * k / (m + k - 1) for m, k in zip(tile, problem.kernel_shape)))


def cpu_tile(problem):
    """:func:`planned_tile` of what the NumPy backend runs: the last axis's tile where
    ``winograd`` takes the last-axis path."""
    from cupyconv.backends.numpy import cost, winograd_axis
    if not cost.winograd_axis_pays(problem):
        return planned_tile(problem)
    m, r = winograd_axis.tile(problem), problem.kernel_shape[-1]
    return dict(tile=f"last axis F({m}, {r})", mult_saved=m * r / (m + r - 1))


def run_case(name, xs, ws, dtype, rounds, small):
    import cupyconv
    from cupyconv.backends.numpy import NumpyBackend
    from cupyconv.dispatch import choose
    x, w, problem = case_inputs(xs, ws, dtype, small)
    backend = NumpyBackend()
    ref = cupyconv.conv(x.astype(np.float64), w.astype(np.float64), padding="same",
                        method="direct")
    row = dict(name=name, dtype=dtype, **cpu_tile(problem),
               workspace_mb=backend.workspace_bytes(problem, "winograd") / 2**20)
    errs = {}
    for method in ("direct", "winograd", "gemm", "fft"):
        y = cupyconv.conv(x, w, padding="same", method=method)
        errs[method] = float(np.sqrt(np.mean((y - ref) ** 2)) / np.sqrt(np.mean(ref ** 2)))
        if method != "direct":
            row[f"{method}_ms"] = 1e3 * time_cpu(
                lambda m=method: cupyconv.conv(x, w, padding="same", method=m), repeat=rounds,
                warmup=1)
    row["auto_ms"] = 1e3 * time_cpu(lambda: cupyconv.conv(x, w, padding="same"), repeat=rounds,
                                    warmup=1)
    row["auto_ran"] = choose(problem, backend).ranked[0]
    # float64: direct IS the reference; compare with gemm's (BLAS) error instead
    base = errs["direct"] if errs["direct"] else errs["gemm"]
    row["error_ratio"] = errs["winograd"] / base if base else math.nan
    row["errors"] = errs
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--small", action="store_true")
    opts = parser.parse_args(argv)
    print("| case | dtype | tile | mults saved | workspace MiB | winograd ms | gemm ms | fft ms "
          "| auto ms (ran) | winograd rel. RMS error | vs direct's |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|")
    for case in CASES:
        r = run_case(*case, opts.rounds, opts.small)
        print(f"| {r['name']} | {r['dtype']} | {r['tile']} | {r.get('mult_saved', 0):.2f}x "
              f"| {r['workspace_mb']:.0f} | {r['winograd_ms']:.1f} | {r['gemm_ms']:.1f} "
              f"| {r['fft_ms']:.1f} | {r['auto_ms']:.1f} ({r['auto_ran']}) "
              f"| {r['errors']['winograd']:.2e} | {r['error_ratio']:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
