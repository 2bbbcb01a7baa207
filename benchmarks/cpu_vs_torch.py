"""The NumPy backend's ``conv`` and its gradients against PyTorch's CPU convolution.

``python -m benchmarks.cpu_vs_torch [--rounds 7] [--baseline REF] [--out FILE] [--phases]``

Issue 28's layers (float32): 2-D N=8 C=K=64 56^2 3x3, 3-D N=2 C=K=32 32^3 3^3, 2-D
depthwise groups=C=64 56^2 3x3, 1-D N=16 C=K=128 L=1024 k=5, a 4-D N=2 C=K=16 12^4 3^4
layer (PyTorch has no 4-D convolution: it is timed against ``--baseline`` only), and the
input and weight gradients of the 2-D and 3-D layers.  Per case the callers take turns
in one round (PyTorch, cupyconv, the baseline), one timed call each after one untimed
call, and the table gives the median of ``--rounds`` rounds.  PyTorch (an optional peer,
``torch.nn.functional`` / ``torch.nn.grad`` with one thread per core) is skipped when it
is not installed.  ``--baseline REF`` times the same calls with cupyconv as of the git
commit ``REF`` (``git archive`` of ``cupyconv/`` and ``cuda_src/`` into a temporary
folder, run in a worker process that answers one call at a time, so the turns still
alternate).  ``taskset -c 0 python -m benchmarks.cpu_vs_torch`` compares one core with
one core (cupyconv takes its cores from the affinity mask, PyTorch is given as many).  Results are compared with
PyTorch's (largest difference relative to the largest magnitude).  The header records the
date, the commit and ``uptime``: a shared, loaded machine slows every caller, unevenly.
``--phases`` instead tabulates where the ungrouped forward layers' ``gemm`` time goes
(padded copy, column copy, GEMM, write back, summed over the blocks; the least of
``--rounds`` calls each), best read on one core (``OPENBLAS_NUM_THREADS=1 taskset -c 0``).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

#: (name, op, x shape, w shape, groups, padding)
CASES = [
    ("2-D N=8 C=K=64 56^2 3x3", "forward", (8, 64, 56, 56), (64, 64, 3, 3), 1, 1),
    ("3-D N=2 C=K=32 32^3 3^3", "forward", (2, 32, 32, 32, 32), (32, 32, 3, 3, 3), 1, 1),
    ("2-D depthwise C=64 56^2 3x3", "forward", (8, 64, 56, 56), (64, 1, 3, 3), 64, 1),
    ("1-D N=16 C=K=128 L=1024 k=5", "forward", (16, 128, 1024), (128, 128, 5), 1, 2),
    ("4-D N=2 C=K=16 12^4 3^4", "forward", (2, 16, 12, 12, 12, 12), (16, 16, 3, 3, 3, 3), 1, 1),
    ("2-D N=8 C=K=64 56^2 3x3", "grad_input", (8, 64, 56, 56), (64, 64, 3, 3), 1, 1),
    ("2-D N=8 C=K=64 56^2 3x3", "grad_weight", (8, 64, 56, 56), (64, 64, 3, 3), 1, 1),
    ("3-D N=2 C=K=32 32^3 3^3", "grad_input", (2, 32, 32, 32, 32), (32, 32, 3, 3, 3), 1, 1),
    ("3-D N=2 C=K=32 32^3 3^3", "grad_weight", (2, 32, 32, 32, 32), (32, 32, 3, 3, 3), 1, 1),
]


def arrays(case):
    """``(x, w, dy)`` of a case, float32, the same in every process (seeded)."""
    _, _, xs, ws, groups, pad = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal(xs).astype(np.float32)
    w = (rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(np.float32)
    out = tuple(s + 2 * pad - k + 1 for s, k in zip(xs[2:], ws[2:]))
    dy = rng.standard_normal((xs[0], ws[0]) + out).astype(np.float32)
    return x, w, dy


def cupyconv_call(case):
    """A no-argument callable running the case with the ``cupyconv`` importable here."""
    import cupyconv
    _, op, xs, ws, groups, pad = case
    x, w, dy = arrays(case)
    kw = dict(padding=pad, groups=groups)
    if op == "forward":
        return lambda: cupyconv.conv(x, w, **kw)
    if op == "grad_input":
        return lambda: cupyconv.conv_grad_input(dy, w, xs, **kw)
    return lambda: cupyconv.conv_grad_weight(x, dy, ws, **kw)


def torch_call(case):
    """PyTorch's callable for the case, or ``None`` (not installed, or no such rank)."""
    try:
        import torch
    except ImportError:
        return None
    _, op, xs, ws, groups, pad = case
    rank = len(xs) - 2
    if rank > 3:
        return None
    conv = (torch.nn.functional.conv1d, torch.nn.functional.conv2d,
            torch.nn.functional.conv3d)[rank - 1]
    name = ("conv1d", "conv2d", "conv3d")[rank - 1]
    x, w, dy = (torch.from_numpy(a) for a in arrays(case))
    kw = dict(padding=pad, groups=groups)
    if op == "forward":
        return lambda: conv(x, w, **kw)
    if op == "grad_input":
        grad = getattr(torch.nn.grad, f"{name}_input")
        return lambda: grad(xs, w, dy, **kw)
    grad = getattr(torch.nn.grad, f"{name}_weight")
    return lambda: grad(x, ws, dy, **kw)


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def worker():
    """The baseline's side: read a case index per line, answer with the seconds of one
    call (the first request of a case also warms it up)."""
    calls = {}
    for line in sys.stdin:
        i = int(line)
        if i not in calls:
            calls[i] = cupyconv_call(CASES[i])
            calls[i]()
        print(json.dumps(_timed(calls[i])), flush=True)


class Baseline:
    """cupyconv as of git ``ref`` in a worker process (one call per request)."""

    def __init__(self, ref):
        # here, not at the top: the worker runs this file as a script, outside the package
        from .baseline_tree import baseline_tree
        self.dir, self.commit = baseline_tree(ref)
        env = dict(os.environ, PYTHONPATH=self.dir)
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=env, cwd=self.dir)

    def call(self, i):
        self.proc.stdin.write(f"{i}\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _header(rounds, baseline):
    import cupyconv
    from cupyconv.backends.numpy.threads import workers
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    try:
        import torch
        peer = f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    except ImportError:
        peer = "torch not installed (skipped)"
    lines = [f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; "
             f"commit {commit} (cupyconv {cupyconv.__version__}); {workers()} cores",
             f"- load (`uptime`) before: {load}",
             f"- peer: {peer}; baseline: "
             f"{baseline.commit if baseline else 'none'}; float32, median of {rounds} "
             "alternating rounds"]
    return lines


#: The phases of gemm's forward (``stats["phases"]``, backends/numpy/gemm.py).
PHASES = ("pad", "column copy", "GEMM", "write back")


def phases(case, rounds):
    """The markdown row of a forward case's gemm phases: per phase the least summed
    seconds over ``rounds`` calls (ms and share of their sum; summed over the threads),
    the least whole call, each thread's busy time in that call (ms, ``/`` between
    threads: near the whole call when the threads are busy, far below it when they wait
    on the GIL or on a serial phase) and the GEMM's GFLOP/s per thread over its least
    time.  The call runs as ``conv`` runs it, under the default workspace limit."""
    from cupyconv.backends.numpy import NumpyBackend, gemm
    from cupyconv.core import ConvProblem
    from cupyconv.core.problem import Operands
    _, op, xs, ws, groups, pad = case
    x, w, _ = arrays(case)
    problem = ConvProblem.create(x_shape=xs, w_shape=ws, groups=groups, padding=pad,
                                 dtype=x.dtype, op=op)
    ops = Operands(activation=x, filter=w)
    limit = NumpyBackend().default_workspace_limit()
    best, whole = {}, []
    for _ in range(rounds):
        stats = {"phases": {}}
        whole.append((_timed(lambda: gemm.run(problem, ops, limit, stats)),
                      stats["phases"].pop("threads", {})))
        for name, times in stats["phases"].items():
            best[name] = min(best.get(name, float("inf")), sum(times))
    total = sum(best.get(p, 0.0) for p in PHASES)
    flops = 2 * problem.groups * problem.gemm_m * problem.gemm_n * problem.gemm_k
    layout = "rows" if gemm.positions_as_rows(problem) else "columns"
    cells = " | ".join(f"{1e3 * best.get(p, 0.0):.1f} ({100 * best.get(p, 0.0) / total:.0f}%)"
                       for p in PHASES)
    call, busy = min(whole, key=lambda c: c[0])
    threads = " / ".join(f"{1e3 * t:.1f}" for _, t in sorted(busy.items()))
    return (f"| {case[0]} | {layout} | {cells} | {1e3 * total:.1f} | {1e3 * call:.1f} "
            f"| {threads} | {flops / best['GEMM'] / 1e9:.0f} |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--baseline", default=None, help="git commit to time as well")
    parser.add_argument("--out", default=None, help="also write the markdown here")
    parser.add_argument("--cases", default=None, help="only cases whose name has this text")
    parser.add_argument("--phases", action="store_true",
                        help="instead: where the forward gemm layers' time goes, by phase")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.worker:
        worker()
        return 0
    if opts.phases:
        lines = _header(opts.rounds, None)[:2] + [
            f"- float32 gemm forward, each phase the least of {opts.rounds} calls"] + [
            "", "| layer | columns | " + " | ".join(PHASES) + " | sum of phases | whole call "
            "| busy per thread | GEMM GFLOP/s per thread |",
            "|---|---|" + "---:|" * (len(PHASES) + 4)]
        print("\n".join(lines), flush=True)
        for case in CASES:
            if case[1] == "forward" and case[4] == 1 and (
                    not opts.cases or opts.cases in case[0]):
                lines.append(phases(case, opts.rounds))
                print(lines[-1], flush=True)
        if opts.out:
            with open(opts.out, "w", encoding="utf-8") as fh:
                fh.write("\n".join(lines) + "\n")
        return 0
    try:
        import torch
        from cupyconv.backends.numpy.threads import workers
        torch.set_num_threads(workers())
    except ImportError:
        pass
    baseline = Baseline(opts.baseline) if opts.baseline else None
    lines = _header(opts.rounds, baseline)
    lines += ["", "| layer | op | cupyconv ms | torch ms | cupyconv / torch | baseline ms "
              "| cupyconv / baseline | agreement vs torch |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    ratios = []
    try:
        for i, case in enumerate(CASES):
            if opts.cases and opts.cases not in f"{case[0]} {case[1]}":
                continue
            ours, peer = cupyconv_call(case), torch_call(case)
            agree = "-"
            if peer is not None:
                a, b = np.asarray(ours()), peer().numpy()
                agree = f"{np.abs(a - b).max() / np.abs(b).max():.1e}"
            times = {"ours": [], "torch": [], "base": []}
            for _ in range(opts.rounds):
                if peer is not None:
                    times["torch"].append(_timed(peer))
                times["ours"].append(_timed(ours))
                if baseline is not None:
                    times["base"].append(baseline.call(i))
            med = {k: 1e3 * statistics.median(v) for k, v in times.items() if v}
            t_ours = med["ours"]
            t_peer, t_base = med.get("torch"), med.get("base")
            if t_peer:
                ratios.append(t_ours / t_peer)
            row = (f"| {case[0]} | {case[1]} | {t_ours:.1f} | "
                   + (f"{t_peer:.1f} | {t_ours / t_peer:.2f}x" if t_peer else "- | -")
                   + (f" | {t_base:.1f} | {t_ours / t_base:.2f}x" if t_base else " | - | -")
                   + f" | {agree} |")
            lines.append(row)
            print(row, flush=True)
    finally:
        if baseline is not None:
            baseline.close()
    if ratios:
        geo = float(np.exp(np.mean(np.log(ratios))))
        tail = (f"\ncupyconv / torch over the {len(ratios)} rows with a peer: geometric mean "
                f"{geo:.2f}x, worst {max(ratios):.2f}x")
        lines.append(tail)
        print(tail)
    if opts.out:
        with open(opts.out, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
