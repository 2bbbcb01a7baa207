"""The ``winograd`` algorithm on the GPU against ``implicit_gemm`` and ``gemm`` (and PyTorch /
cuDNN float32 when importable), same run: issue 15's GPU goals.

``python -m benchmarks.winograd_gpu [--rounds 10] [--small]``

Per case (:data:`benchmarks.winograd_cpu.CASES`, CuPy arrays): the tiles the CUDA path
plans, the multiplications saved, the workspace, the relative RMS error against a float64
``direct`` reference, and the median milliseconds (CUDA events) of ``winograd``,
``implicit_gemm``, ``gemm`` and cuDNN, with winograd's speed-up over implicit_gemm, and for
winograd and implicit_gemm the host / device time per call
(:func:`benchmarks.timing.host_device_split`: which of Python and launches or the kernels
bounds the call; the first GPU run found every small case near 2 ms) and the kernels alone
(the call replayed as a CUDA graph, :func:`benchmarks.timing.graph_time`).  Prints
nothing but a reason when CuPy sees no device; never run by the tests.
"""
from __future__ import annotations

import argparse
import math

import numpy as np

from cupyconv._bench.timing import graph_time, host_device_split, time_cuda
from cupyconv._bench.peers import cudnn_conv
from .winograd_cpu import CASES, case_inputs, planned_tile

GOALS = ("3-D 3x3x3 float32 (TF32 off): winograd >= 1.5x implicit_gemm and >= 1.0x cuDNN; "
         "float64 F(4,3) in 3-D: >= 2x float64 implicit_gemm")


def _device_reason():
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "CuPy sees no CUDA device"
    except Exception as exc:  # noqa: BLE001 - any failure means "no GPU here"
        return f"no usable CuPy/CUDA: {exc}"
    return None


def run_case(name, xs, ws, dtype, rounds, small):
    import cupy
    import cupyconv
    from cupyconv._kernels import registry
    x, w, problem = case_inputs(xs, ws, dtype, small)
    row = dict(name=name, dtype=dtype, times={},
               **planned_tile(problem, registry.WINOGRAD_MAX_ALPHA))
    xd, wd = cupy.asarray(x), cupy.asarray(w)
    ref = cupyconv.conv(x.astype(np.float64), w.astype(np.float64), padding="same",
                        method="gemm")
    for method in ("winograd", "implicit_gemm", "gemm"):
        try:
            y = cupy.asnumpy(cupyconv.conv(xd, wd, padding="same", method=method))
        except (ValueError, cupyconv.OutOfMemoryError) as exc:
            row["times"][method] = f"refused: {exc}"
            continue
        if method == "winograd":
            row["error"] = float(np.sqrt(np.mean((y - ref) ** 2)) / np.sqrt(np.mean(ref ** 2)))
        call = lambda m=method: cupyconv.conv(xd, wd, padding="same", method=m)  # noqa: E731
        row["times"][method] = 1e3 * time_cuda(call, repeat=rounds)
        if method in ("winograd", "implicit_gemm"):
            row.setdefault("split", {})[method] = host_device_split(call, repeat=rounds)
            row.setdefault("graph", {})[method] = graph_time(call, repeat=rounds)[0]
    cudnn = cudnn_conv(xd, wd, tuple(k // 2 for k in ws[2:])) if dtype == "float32" else None
    if cudnn is not None:                                   # TF32 off
        row["times"]["cudnn"] = 1e3 * time_cuda(cudnn, repeat=rounds)
    return row


def _split(row, method):
    host, device = row.get("split", {}).get(method, (None, None))
    kernels = row.get("graph", {}).get(method)
    alone = "-" if kernels is None else f"{1e3 * kernels:.2f}"
    return "-" if host is None else f"{1e3 * host:.2f} / {1e3 * device:.2f} / {alone}"


def _ms(value):
    return f"{value:.2f}" if isinstance(value, float) else "-"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--small", action="store_true")
    opts = parser.parse_args(argv)
    why = _device_reason()
    if why is not None:
        print(f"winograd_gpu: skipped ({why})")
        return 0
    print(f"goals: {GOALS}")
    print("| case | dtype | tile | mults saved | winograd ms | implicit_gemm ms | gemm ms "
          "| cuDNN ms | vs implicit_gemm | winograd rel. RMS error "
          "| winograd host / device / kernels alone ms "
          "| implicit_gemm host / device / kernels alone ms |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for case in CASES:
        r = run_case(*case, opts.rounds, opts.small)
        t = r["times"]
        wino, ig = t.get("winograd"), t.get("implicit_gemm")
        speedup = (f"{ig / wino:.2f}x" if isinstance(wino, float) and isinstance(ig, float)
                   else "-")
        print(f"| {r['name']} | {r['dtype']} | {r['tile']} | {r.get('mult_saved', 0):.2f}x "
              f"| {_ms(wino)} | {_ms(ig)} | {_ms(t.get('gemm'))} | {_ms(t.get('cudnn'))} "
              f"| {speedup} | {r.get('error', math.nan):.2e} "
              f"| {_split(r, 'winograd')} | {_split(r, 'implicit_gemm')} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
