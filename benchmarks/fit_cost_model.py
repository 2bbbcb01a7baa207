"""Fit the GPU cost model's efficiencies to a device run's committed timings.

``python -m benchmarks.fit_cost_model DIR [--sm 132 --clock 1.98e9 --bandwidth 4.05e12]``

``DIR`` holds the files ``scripts/device_check.sh`` writes (``reference_cases.json``,
``tensor_cores.json``, ``all_quick_cuda.json`` or ``bench/all_quick_cuda.json``).  Each
timing of one of our algorithms is turned into the efficiency for which the model predicts
it (:func:`cupyconv.backends.cuda.cost.calibrate`, in that algorithm's own terms).  Timings
whose prediction is mostly the per-call host time (``HOST_S`` at least half of it) say
nothing about the device and are left out.  Prints, per efficiency entry, every fitted
value with its case and the median: the numbers behind ``cost.EFFICIENCY``; then how
often the model with ``cost.EFFICIENCY`` picks the fastest measured algorithm of a case
(what ``auto`` would have done among the algorithms the run timed).

The device is the one the run names, with the facts the files do not hold given as flags
(defaults: the H200 of 2026-11-30/12-01, 132 SMs, the 1.98 GHz clock CuPy reports, and the
copy bandwidth the bench measured, 4.05 TB/s).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics

import numpy as np

from cupyconv.backends.cuda import cost, pricing
from cupyconv.backends.cuda.runners import DeviceInfo
from cupyconv.core.problem import ConvProblem

from . import reference_cases, tensor_cores
from cupyconv._bench.problems import cases


def _load(folder, *names):
    for name in names:
        path = os.path.join(folder, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                return json.load(fh)
    return None


def measurements(folder):
    """``[(label, problem, algorithm, seconds)]`` from a device run's files."""
    out = []
    ref = _load(folder, "reference_cases.json")
    if ref:
        shapes = {c[0]: c for c in reference_cases.CASES}
        for r in ref["rows"]:
            if r["who"].startswith("cupyconv ") and r["seconds"] and r["case"] in shapes:
                name, kind, xs, ws, geo = shapes[r["case"]]
                out.append((r["case"], reference_cases.case_problem(kind, xs, ws, geo),
                            r["who"].split()[1], r["seconds"]))
    tc = _load(folder, "tensor_cores.json")
    if tc:
        shapes = {c[0]: c[1:] for c in tensor_cores.CASES}
        for r in tc["rows"]:
            who = r["who"].split()
            if who[0] != "cupyconv" or who[1] == "auto" or not r["seconds"]:
                continue
            dtype, precision = tensor_cores.KINDS[r["kind"]][:2]
            xs, ws = shapes[r["case"]]
            problem = ConvProblem.create(x_shape=xs, w_shape=ws, padding=1, dtype=dtype,
                                         precision=precision)
            out.append((f"{r['case']} {r['kind']}", problem, who[1], r["seconds"]))
    bench = _load(folder, "all_quick_cuda.json", os.path.join("bench", "all_quick_cuda.json"))
    if bench:
        by_name = {c.name: c for c in cases(bench["meta"]["suite"], quick=bench["meta"]["quick"])}
        for r in bench["rows"]:
            case = by_name.get(r["name"])
            for algo, seconds in (r.get("method_s") or {}).items():
                if case is not None and seconds:
                    out.append((r["name"], case.problem(), algo, seconds))
    return out


def fit(rows, device):
    """``{key: [(value, label, algorithm)]}`` of the timings the device dominates."""
    fitted = {}
    for label, problem, algo, seconds in rows:
        if cost.HOST_S.get(algo, 0.0) >= 0.5 * seconds:
            continue
        key, value = pricing.calibrate(problem, device, algo, seconds)
        if value is not None:
            fitted.setdefault(key, []).append((value, label, algo))
    return fitted


def choices(rows, device, efficiency=None):
    """Per case with two or more timed algorithms: ``(label, predicted best, measured
    best, measured time of the predicted best / measured best)``."""
    by_case = {}
    for label, problem, algo, seconds in rows:
        by_case.setdefault(label, (problem, {}))[1][algo] = seconds
    out = []
    for label, (problem, timed) in by_case.items():
        if len(timed) < 2:
            continue
        predicted = pricing.predict_times(problem, device, list(timed), efficiency=efficiency)
        pick = min(predicted, key=predicted.get)
        best = min(timed, key=timed.get)
        out.append((label, pick, best, timed[pick] / timed[best]))
    return out


def _score(rows, device, eff):
    picks = choices(rows, device, eff)
    return float(np.mean([np.log(r) for *_, r in picks])) if picks else 0.0


def search(rows, device, fitted, sweeps=3):
    """Coordinate descent over the entries, each among its default and its fitted values,
    for the efficiencies whose picks lose least time against the fastest measured
    (geometric mean); ties keep the earlier candidate (the default first)."""
    eff = dict(cost.EFFICIENCY)
    for _ in range(sweeps):
        for key, values in sorted(fitted.items()):
            candidates = [eff[key]] + sorted({v for v, _, _ in values})
            scored = [(_score(rows, device, dict(eff, **{key: c})), i, c)
                      for i, c in enumerate(candidates)]
            eff[key] = min(scored)[2]
    return eff


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--name", default="NVIDIA H200")
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--sm", type=int, default=132)
    ap.add_argument("--clock", type=float, default=1.98e9)
    ap.add_argument("--bandwidth", type=float, default=4.05e12)
    ap.add_argument("--search", action="store_true",
                    help="also search the entries for the best picks (coordinate descent)")
    opts = ap.parse_args(argv)
    device = DeviceInfo(name=f"{opts.name} (fit)", arch=opts.arch, sm_count=opts.sm,
                        clock_hz=opts.clock, bandwidth=opts.bandwidth, fp32_lanes=128,
                        fp64_ratio=0.5, smem_per_block=48 * 1024, free_memory=2**36)
    cost.efficiencies.cache_clear()
    rows = measurements(opts.folder)
    fitted = fit(rows, device)
    print("| entry | default | fitted median | fitted values (case, algorithm) |\n|---|---:|---:|---|")
    for key in sorted(set(cost.EFFICIENCY) | set(fitted)):
        values = fitted.get(key, [])
        med = f"{statistics.median(v for v, _, _ in values):.3g}" if values else "-"
        cells = "; ".join(f"{v:.3g} ({label}, {algo})" for v, label, algo in
                          sorted(values, key=lambda t: -t[0]))
        print(f"| {key} | {cost.EFFICIENCY.get(key, np.nan):.3g} | {med} | {cells} |")
    picks = choices(rows, device)
    hits = sum(p == b for _, p, b, _ in picks)
    print(f"\nthe model with cost.EFFICIENCY picks the fastest measured algorithm in "
          f"{hits}/{len(picks)} cases; geometric mean of picked / fastest time "
          f"{float(np.exp(np.mean([np.log(r) for *_, r in picks]))):.2f}x\n"
          "| case | model picks | fastest | picked / fastest |\n|---|---|---|---:|")
    for label, pick, best, ratio in picks:
        print(f"| {label} | {pick} | {best} | {ratio:.2f}x |")
    if opts.search:
        eff = search(rows, device, fitted)
        picks = choices(rows, device, eff)
        print(f"\nsearched efficiencies (picked / fastest {np.exp(_score(rows, device, eff)):.2f}x, "
              f"fastest in {sum(p == b for _, p, b, _ in picks)}/{len(picks)}):")
        print({k: float(f"{v:.3g}") for k, v in sorted(eff.items())})
        for label, pick, best, ratio in picks:
            if pick != best:
                print(f"  still missed: {label}: {pick} instead of {best} ({ratio:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
