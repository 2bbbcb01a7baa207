"""Device microbenchmarks: mma.sync issue rate per tensor-core atom, L2 and HBM bandwidth.

``python -m benchmarks.device_micro [--backend cuda|emulated] [--tiny] [--out DIR]``

A step of ``scripts/device_check.sh`` (about a minute of device time at most; ~5 s on an
H200 by the sizes below), so the next lent GPU says what limits each tile: the rate one warp
pipeline of independent ``mma.sync`` reaches (HMMA f16 / bf16 / TF32, DMMA m8n8k4 and, on
sm_90, m16n8k16), and the copy bandwidth of an L2-resident and an HBM-sized working set.
The kernels are ``cuda_src/bench/device_micro.cu``, compiled by the project's loader
(NVRTC, cached) on ``cuda`` or by the emulator on ``emulated`` (``--tiny``: one block, a few
iterations; the numbers mean nothing there, the run checks the driver and the kernels).

Each measurement is one JSON row in ``DIR/device_micro.json`` and one printed line:

- ``mma``: atom, PTX instruction, FLOPs per MMA, TFLOP/s over the grid (CUDA events), the
  FLOPs per SM per clock that gives (at the device's clock) and its fraction of the
  cost model's tensor peak (``cupyconv.backends.cuda.cost.TENSOR_FLOPS_PER_SM_CLOCK``), and
  the mean ``clock64`` cycles per MMA of one warp.
- ``copy``: level (``l2`` / ``hbm``), bytes moved (read + write), GB/s.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

#: The kernel file, relative to cuda_src/.
SOURCE = "bench/device_micro.cu"
#: Independent MMAs per warp per iteration (accumulator chains).
CHAINS = 8
#: atom -> (PTX shape and types, the cost model's tensor kind, M*N*K, needs sm_90)
ATOMS = {
    "MmaF16_m16n8k16": ("m16n8k16.f32.f16.f16.f32", "float16", 16 * 8 * 16, False),
    "MmaBf16_m16n8k16": ("m16n8k16.f32.bf16.bf16.f32", "float16", 16 * 8 * 16, False),
    "MmaTf32_m16n8k8": ("m16n8k8.f32.tf32.tf32.f32", "tf32", 16 * 8 * 8, False),
    "MmaF64_m8n8k4": ("m8n8k4.f64.f64.f64.f64", "float64", 8 * 8 * 4, False),
    "MmaF64_m16n8k16": ("m16n8k16.f64.f64.f64.f64", "float64", 16 * 8 * 16, True),
}
#: Sizes: (MMA iterations, blocks per SM, threads per block, L2 working set bytes, L2 passes,
#: HBM working set bytes, HBM passes); the working set is split into source and destination.
FULL = dict(iters=512, blocks_per_sm=8, threads=128, l2_bytes=16 << 20, l2_passes=20,
            hbm_bytes=2 << 30, hbm_passes=2)
TINY = dict(iters=2, blocks_per_sm=1, threads=32, l2_bytes=16 << 10, l2_passes=2,
            hbm_bytes=64 << 10, hbm_passes=1)


def mma_name(atom: str) -> str:
    """Name expression of the issue-rate kernel of ``atom``."""
    return f"mma_issue_rate<cc::{atom}, {CHAINS}>"


def atoms_for(arch: int):
    """The atoms a device of compute capability ``arch`` (e.g. 90) runs."""
    return [a for a, (*_, sm90) in ATOMS.items() if arch >= 90 or not sm90]


class _Cuda:
    """Launches and times on the current CuPy device."""

    def __init__(self, names):
        import cupy
        from cupyconv._compile import load_module
        self.xp = cupy
        self.module = load_module(SOURCE, names)
        dev = cupy.cuda.Device()
        self.arch = int(dev.compute_capability)
        self.sms = int(dev.attributes["MultiProcessorCount"])
        self.clock_hz = float(cupy.cuda.runtime.getDeviceProperties(dev.id)["clockRate"]) * 1e3
        self.device = cupy.cuda.runtime.getDeviceProperties(dev.id)["name"].decode()

    def time(self, name, grid, block, args, repeats=3):
        kern = self.module.get_function(name)
        kern(grid, block, args)                      # warm-up (and the first-launch costs)
        start, stop = self.xp.cuda.Event(), self.xp.cuda.Event()
        start.record()
        for _ in range(repeats):
            kern(grid, block, args)
        stop.record()
        stop.synchronize()
        return self.xp.cuda.get_elapsed_time(start, stop) / 1e3 / repeats


class _Emulated:
    """The same launches on the CPU emulator (one pass, host timing)."""

    def __init__(self, names):
        from cupyconv._emulation import EmulatedModule, cuda_src_dir
        self.xp = np
        self.module = EmulatedModule(path=cuda_src_dir() / SOURCE, name_expressions=names)
        self.arch, self.sms, self.clock_hz, self.device = 90, 1, None, "emulated"

    def time(self, name, grid, block, args, repeats=1):
        kern = self.module.get_function(name)
        t0 = time.perf_counter()
        for _ in range(repeats):
            kern(grid, block, args)
        return (time.perf_counter() - t0) / repeats


def _peak(kind, arch):
    from cupyconv.backends.cuda.cost import TENSOR_FLOPS_PER_SM_CLOCK
    return TENSOR_FLOPS_PER_SM_CLOCK.get(arch, {}).get(kind)


def measure_mma(runner, size):
    """One row per atom the device runs."""
    xp, rows = runner.xp, []
    blocks = runner.sms * size["blocks_per_sm"]
    warps = blocks * size["threads"] // 32
    for atom in atoms_for(runner.arch):
        instr, kind, mnk, _ = ATOMS[atom]
        cycles = xp.zeros(warps, np.int64)
        sink = xp.zeros(blocks * size["threads"], np.float64)
        seconds = runner.time(mma_name(atom), (blocks,), (size["threads"],),
                              (cycles, sink, np.int32(size["iters"])))
        mmas = warps * size["iters"] * CHAINS
        flops = 2.0 * mnk * mmas
        per_warp = float(np.asarray(cycles.get() if hasattr(cycles, "get") else cycles).mean())
        row = dict(kind="mma", atom=atom, instruction=f"mma.sync.aligned.{instr}",
                   flops_per_mma=2 * mnk, seconds=seconds, tflops=flops / seconds / 1e12,
                   clock64_per_mma_per_warp=per_warp / (size["iters"] * CHAINS),
                   sink_mean=float(sink.mean()))   # the accumulators' sum: a check of the run
        if runner.clock_hz:
            per_sm_clock = flops / seconds / runner.sms / runner.clock_hz
            peak = _peak(kind, runner.arch)
            row.update(flops_per_sm_clock=per_sm_clock,
                       model_peak_flops_per_sm_clock=peak,
                       fraction_of_model_peak=per_sm_clock / peak if peak else None)
        rows.append(row)
    return rows


def measure_copy(runner, size):
    """L2-resident and HBM-sized copies: GB/s of read + write traffic."""
    xp, rows = runner.xp, []
    blocks = runner.sms * 4
    for level, nbytes, passes in (("l2", size["l2_bytes"], size["l2_passes"]),
                                  ("hbm", size["hbm_bytes"], size["hbm_passes"])):
        n = nbytes // 2 // 16                        # float4 elements per buffer
        src = xp.ones(n * 4, np.float32)
        dst = xp.zeros(n * 4, np.float32)
        seconds = runner.time("copy_bandwidth", (blocks,), (256,),
                              (src, dst, np.int64(n), np.int32(passes)))
        moved = 2 * 16 * n * passes
        rows.append(dict(kind="copy", level=level, working_set_bytes=2 * 16 * n,
                         bytes_moved=moved, seconds=seconds, gbps=moved / seconds / 1e9,
                         copied=bool((dst == 1).all())))
        del src, dst
    return rows


def describe(row) -> str:
    """One printed line per measurement."""
    if row["kind"] == "mma":
        frac = row.get("fraction_of_model_peak")
        share = f", {100 * frac:.0f}% of the model's tensor peak" if frac else ""
        return (f"mma {row['atom']:<17} {row['tflops']:9.2f} TFLOP/s{share}; "
                f"{row['clock64_per_mma_per_warp']:.1f} clock64/MMA/warp")
    return (f"copy {row['level']:<4} {row['working_set_bytes'] / 2**20:8.1f} MiB "
            f"{row['gbps']:10.1f} GB/s")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.device_micro")
    ap.add_argument("--backend", choices=("cuda", "emulated"), default="cuda")
    ap.add_argument("--tiny", action="store_true", help="smallest sizes (a check of the driver)")
    ap.add_argument("--out", default=None, help="folder for device_micro.json")
    opts = ap.parse_args(argv)
    size = TINY if opts.tiny else FULL
    names = [mma_name(a) for a in ATOMS] + ["copy_bandwidth"]
    if opts.backend == "cuda":
        import cupy
        arch = int(cupy.cuda.Device().compute_capability)
        runner = _Cuda([mma_name(a) for a in atoms_for(arch)] + ["copy_bandwidth"])
    else:
        runner = _Emulated(names)
    rows = measure_mma(runner, size) + measure_copy(runner, size)
    for row in rows:
        print("micro " + describe(row), flush=True)
    if opts.out:
        os.makedirs(opts.out, exist_ok=True)
        Path(opts.out, "device_micro.json").write_text(json.dumps(
            dict(device=runner.device, arch=runner.arch, sms=runner.sms, clock_hz=runner.clock_hz,
                 backend=opts.backend, sizes=size, rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
