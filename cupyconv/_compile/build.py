"""Ahead-of-time NVRTC compilation of the kernel registry.

``build()`` compiles every instantiation of :mod:`cupyconv._kernels.registry`
for each requested arch (no GPU needed), one NVRTC program per group
(source, dtype, rank), stores the cubins in the cache of
:mod:`cupyconv._compile.cache` and returns one :class:`KernelReport` per
kernel with the registers, shared memory, stack and spills reported by
``ptxas -v``.  ``python -m cupyconv build`` calls :func:`main`, whose flags
are validated (``--arch`` must be ``sm_NN`` values, ``--ranks`` ranges in
``1..MAX_RANK``): a bad value is an argparse error (exit code 2), never an
empty build.

An arch-specific family (``KernelFamily.arch_specific = ("sm_90a",)``) is
built for its targets only, the portable ones never for them (:func:`group_work`).

:func:`compile_group` is the one cache-or-compile step (the loader uses it
too).  On a miss in a cache that cannot be written (a shared, prebuilt,
read-only cache) the binary is kept in a private temporary directory of
this process instead, with one :class:`cupyconv._fsutil.ReadOnlyCacheWarning`.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import re
import sys
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .._fsutil import warn_read_only
from .._kernels import registry
from . import cache
from .compat import ARCH_SPECIFIC
from ._nvrtc import KernelCompileError, NvrtcUnavailable, compile_program, nvrtc_version
from .progress import ProgressBar

__all__ = ["DEFAULT_ARCHS", "KernelReport", "compile_options", "compile_group", "build",
           "parse_ptxas_log", "format_report", "main", "KernelCompileError", "parse_archs",
           "parse_ranks", "ProgressBar", "GroupResult", "compile_groups", "group_work"]

#: Architectures built by default (``sm_90a`` builds only the families that declare it).
DEFAULT_ARCHS = ("sm_80", "sm_90", "sm_90a")

_SM = re.compile(r"sm_\d{2,3}|" + "|".join(map(re.escape, ARCH_SPECIFIC)))


@dataclasses.dataclass(frozen=True)
class KernelReport:
    """Resource usage of one compiled kernel (from ``ptxas -v``)."""

    family: str
    name: str
    arch: str
    registers: int
    smem_bytes: int
    stack_bytes: int
    spill_stores: int
    spill_loads: int
    cached: bool
    seconds: float

    @property
    def spills(self) -> int:
        """Spill stores plus spill loads, in bytes."""
        return self.spill_stores + self.spill_loads


def compile_options(arch: str, *, fp16: bool = False) -> Tuple[str, ...]:
    """NVRTC options of every cupyconv kernel.

    ``-ftz`` is NOT passed (unlike ``cupy.RawModule(code=...)``): float32
    denormals are kept.  ``cuda_fp16.h`` is only pulled in for half kernels
    (``-DCUPYCONV_NO_FP16`` otherwise), so no CUDA toolkit headers are needed.
    """
    opts = ["-std=c++17", f"-arch={arch}", "--ptxas-options=-v"]
    if not fp16:
        opts.append("-DCUPYCONV_NO_FP16")
    return tuple(opts)


def _include_options() -> Tuple[str, ...]:
    return (f"-I{cache.cuda_src_dir()}",)


def compile_group(source: str, name_expressions: Sequence[str], arch: str, *,
                  root: Optional[Path] = None, force: bool = False):
    """Compile (or fetch from the cache) one NVRTC program.

    Parameters
    ----------
    source : str
        File relative to ``cuda_src/``.
    name_expressions : sequence of str
    arch : str
        ``"sm_80"``, ``"sm_90"``, ... (a cubin) or ``"compute_90"`` (PTX).
    root : Path, optional
        Cache root (default :func:`cache.cache_dir`).
    force : bool
        Recompile even on a cache hit.

    Returns
    -------
    (binary_path, meta, cached, seconds)
        ``meta`` has ``lowered`` (name -> symbol) and ``log``.  The path is
        in the private temporary directory of :func:`cache.scratch_root`
        when the cache could not be written.

    Raises
    ------
    KernelCompileError
    cupyconv._fsutil.InsecureCacheError
        If the cache is owned by another user or group/world-writable.
    """
    src_path = cache.cuda_src_dir() / source
    opts = compile_options(arch)
    names = sorted(set(name_expressions))
    key = cache.entry_key(nvrtc_version=nvrtc_version(), arch=arch, options=opts,
                          source=src_path, name_expressions=names)
    if not force:
        hit = cache.lookup(arch, source, key, names, root)
        scratch = cache.scratch_root(root, create=False)
        if hit is None and scratch is not None:
            hit = cache.lookup(arch, source, key, names, scratch)
        if hit is not None:
            return hit[0], hit[1], True, 0.0
    t0 = time.perf_counter()
    code = src_path.read_text()
    binary, log, lowered = compile_program(code, str(src_path), opts + _include_options(), names,
                                           ptx=arch.startswith("compute_"))
    seconds = time.perf_counter() - t0
    problem = cache.validate_binary(binary, arch, lowered.values())
    if problem is not None or not cache.valid_names(lowered, names):
        raise KernelCompileError(f"NVRTC output for {arch} failed validation: {problem}",
                                 log=log, options=opts, source=str(src_path),
                                 name_expressions=names)
    meta = {"lowered": lowered, "log": log, "options": list(opts),
            "nvrtc": list(nvrtc_version()), "seconds": seconds}
    try:
        path, meta = cache.write_entry(arch, source, key, binary, meta, root)
    except OSError as exc:              # a read-only (e.g. shared, prebuilt) cache
        warn_read_only(root if root is not None else cache.cache_dir(), exc)
        path, meta = cache.write_entry(arch, source, key, binary, meta, cache.scratch_root(root))
    return path, meta, False, seconds


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")
_PROPS = re.compile(r"Function properties for (\S+)")


def parse_ptxas_log(log: str) -> Dict[str, Dict[str, int]]:
    """Mangled symbol -> {registers, smem_bytes, stack_bytes, spill_stores, spill_loads}."""
    out: Dict[str, Dict[str, int]] = {}
    current = None
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = out.setdefault(m.group(1), dict(registers=0, smem_bytes=0, stack_bytes=0,
                                                      spill_stores=0, spill_loads=0))
            continue
        m = _PROPS.search(line)
        if m:       # a kernel's own properties, or a called function's (not counted)
            current = out.get(m.group(1))
            continue
        if current is None:
            continue
        m = _STACK.search(line)
        if m:
            current.update(stack_bytes=int(m.group(1)), spill_stores=int(m.group(2)),
                           spill_loads=int(m.group(3)))
            continue
        m = _USED.search(line)
        if m:
            current["registers"] = int(m.group(1))
            current["smem_bytes"] = int(m.group(2) or 0)
    return out


def _reports(group_insts, arch, meta, cached, seconds) -> List[KernelReport]:
    usage = parse_ptxas_log(meta.get("log", ""))
    out = []
    for inst in group_insts:
        u = usage.get(meta["lowered"].get(inst.name, ""), {})
        out.append(KernelReport(inst.family, inst.name, arch, u.get("registers", -1),
                                u.get("smem_bytes", -1), u.get("stack_bytes", -1),
                                u.get("spill_stores", -1), u.get("spill_loads", -1), cached, seconds))
    return out


@dataclasses.dataclass(frozen=True)
class GroupResult:
    """One compiled (or cached) NVRTC program of :func:`compile_groups`."""

    arch: str
    source: str
    dtype: str
    rank: int
    members: Tuple[registry.Instantiation, ...]
    path: Path
    meta: dict
    cached: bool
    seconds: float


def compile_groups(work: Sequence[Tuple[str, Tuple[str, str, int], Sequence]], *,
                   root: Optional[Path] = None, force: bool = False, progress: bool = True,
                   jobs: Optional[int] = None, desc: str = "cupyconv build") -> List[GroupResult]:
    """Compile work items ``(arch, (source, dtype, rank), members)`` in parallel.

    ``arch`` may be ``sm_XY`` (a cubin) or ``compute_XY`` (PTX).  The
    progress bar counts kernels (instantiations), with the time left.  On
    an error the items not started are cancelled and the error is raised.

    Returns
    -------
    list of GroupResult
        In completion order.
    """
    bar = ProgressBar(sum(len(m) for _, _, m in work), progress, desc)
    results: List[GroupResult] = []

    def one(item):
        arch, (source, dt, r), members = item
        path, meta, cached, secs = compile_group(source, [m.name for m in members], arch,
                                                 root=root, force=force)
        return GroupResult(arch, source, dt, r, tuple(members), Path(path), meta, cached, secs)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1)
    try:
        futures = [pool.submit(one, item) for item in work]
        for fut in concurrent.futures.as_completed(futures):
            res = fut.result()
            results.append(res)
            bar.update(len(res.members), f"{res.arch} {Path(res.source).stem} {res.dtype} {res.rank}-D")
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True)
        bar.close()
    return results


def group_work(archs: Iterable[str], ranks: Iterable[int], families: Optional[Iterable[str]] = None,
               dtypes: Optional[Iterable] = None):
    """``(arch, group, members)`` for every arch and registry group of the selection.

    A group goes with the archs its family builds for (``KernelFamily.builds_for``).
    """
    groups: Dict[Tuple[str, str, int], list] = {}
    for inst in registry.instantiations(families, ranks=ranks, dtypes=dtypes):
        groups.setdefault(inst.group, []).append(inst)
    out = []
    for arch in archs:
        for g, members in groups.items():
            chosen = [m for m in members if registry.FAMILIES[m.family].builds_for(arch)]
            if chosen:
                out.append((arch, g, chosen))
    return out


def build(archs: Iterable[str] = DEFAULT_ARCHS, ranks: Iterable[int] = range(1, registry.MAX_RANK + 1),
          families: Optional[Iterable[str]] = None, dtypes: Optional[Iterable] = None, *,
          progress: bool = True, jobs: Optional[int] = None, root: Optional[Path] = None,
          force: bool = False) -> List[KernelReport]:
    """Compile every registry instantiation for every arch into the cache.

    Parameters
    ----------
    archs : iterable of str
    ranks : iterable of int
    families : iterable of str, optional
        Subset of :data:`registry.FAMILIES` (default: all).
    dtypes : iterable, optional
        Subset of :data:`registry.DTYPES` (default: all).
    progress : bool
        Show a progress bar on stderr (kernels done / total, time left).
    jobs : int, optional
        Parallel NVRTC programs (default: CPU count).
    root : Path, optional
        Cache root.
    force : bool
        Recompile cached entries.

    Returns
    -------
    list of KernelReport
        Sorted by arch, family, name.

    Raises
    ------
    ValueError
        For no archs, an arch that is not ``sm_NN`` (or a known arch-specific
        target such as ``sm_90a``) or no ranks.
    """
    archs, ranks = list(archs), list(ranks)
    bad = [a for a in archs if not isinstance(a, str) or not _SM.fullmatch(a)]
    if not archs or bad:
        raise ValueError(f"archs must be a non-empty list of sm_NN such as sm_90 (or the "
                         f"arch-specific {', '.join(ARCH_SPECIFIC)}), got {archs!r}")
    if not ranks:
        raise ValueError("ranks is empty: nothing to build")
    work = group_work(archs, ranks, families, dtypes)
    reports: List[KernelReport] = []
    for res in compile_groups(work, root=root, force=force, progress=progress, jobs=jobs):
        reports.extend(_reports(res.members, res.arch, res.meta, res.cached, res.seconds))
    reports.sort(key=lambda k: (k.arch, k.family, k.name))
    return reports


def format_report(reports: Sequence[KernelReport]) -> str:
    """Fixed-width table: arch, kernel, registers, smem, stack, spills, cached."""
    head = f"{'arch':<6} {'kernel':<72} {'regs':>4} {'smem':>6} {'stack':>5} {'spill st/ld':>11} {'cached':>6}"
    lines = [head, "-" * len(head)]
    for r in reports:
        lines.append(f"{r.arch:<6} {r.name:<72} {r.registers:>4} {r.smem_bytes:>6} {r.stack_bytes:>5} "
                     f"{f'{r.spill_stores}/{r.spill_loads}':>11} {'yes' if r.cached else 'no':>6}")
    return "\n".join(lines)


def parse_archs(text: str) -> List[str]:
    """``"sm_80,sm_90"`` -> ``["sm_80", "sm_90"]``.

    Raises
    ------
    argparse.ArgumentTypeError
        For an empty list or an item that is not ``sm_NN`` or a known
        arch-specific target (``sm_90a``).
    """
    archs = [a.strip() for a in text.split(",")]
    bad = [a for a in archs if not _SM.fullmatch(a)]
    if not text.strip() or bad:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of sm_NN archs such as sm_80,sm_90 (arch-specific: "
            f"{', '.join(ARCH_SPECIFIC)}); got {text!r}")
    return list(dict.fromkeys(archs))


def parse_ranks(text: str) -> List[int]:
    """``"1-3,5"`` -> ``[1, 2, 3, 5]``.

    Raises
    ------
    argparse.ArgumentTypeError
        For an empty list, a descending range or a rank outside ``1..MAX_RANK``.
    """
    allowed = f"ranks 1..{registry.MAX_RANK} as a range 1-8 or a list 1,2,3"
    out: List[int] = []
    try:
        for part in text.split(","):
            lo, sep, hi = part.partition("-")
            lo, hi = int(lo), int(hi if sep else lo)
            if not 1 <= lo <= hi <= registry.MAX_RANK:
                raise ValueError(part)
            out.extend(range(lo, hi + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {allowed}; got {text!r}") from None
    return sorted(set(out))


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer; got {text!r}")
    return value


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m cupyconv build [--arch sm_80,sm_90] [--ranks 1-8] [--families ...]``."""
    work = group_work(DEFAULT_ARCHS, range(1, registry.MAX_RANK + 1))
    ap = argparse.ArgumentParser(
        prog="python -m cupyconv build",
        description="Ahead-of-time compile the CUDA kernels with NVRTC into the user cache "
                    "(no GPU needed). A progress bar shows kernels done / total and the time "
                    "left (drawn by tqdm when it is installed).",
        epilog=f"With the defaults: {sum(len(m) for _, _, m in work):,} kernels in "
               f"{len(work)} NVRTC programs ({', '.join(DEFAULT_ARCHS)}; ranks "
               f"1-{registry.MAX_RANK}; every family and dtype).")
    ap.add_argument("--arch", type=parse_archs, default=",".join(DEFAULT_ARCHS),
                    help="comma-separated sm_NN, e.g. sm_80,sm_90; sm_90a builds the "
                         f"arch-specific (warpgroup MMA) families (default: "
                         f"{','.join(DEFAULT_ARCHS)})")
    ap.add_argument("--ranks", type=parse_ranks, default=f"1-{registry.MAX_RANK}",
                    help=f"1..{registry.MAX_RANK}, e.g. 1-8 or 1,2,3 (default: "
                         f"1-{registry.MAX_RANK})")
    ap.add_argument("--families", default=None,
                    help=f"comma-separated subset of {sorted(registry.FAMILIES)} (default: all)")
    ap.add_argument("--dtypes", default=None,
                    help=f"comma-separated subset of {sorted(registry.DTYPES)} (default: all)")
    ap.add_argument("--jobs", type=_positive_int, default=None,
                    help="NVRTC programs compiled in parallel (default: the CPU count)")
    ap.add_argument("--force", action="store_true", help="recompile cached kernels (default: reuse them)")
    ap.add_argument("--quiet", action="store_true",
                    help="no progress bar, no table (default: both)")
    args = ap.parse_args(argv)
    try:
        nvrtc_version()             # before any progress bar: nothing can compile without it
    except NvrtcUnavailable as exc:
        print(f"cannot build: NVRTC not found ({exc})", file=sys.stderr)
        return 1
    try:
        reports = build(archs=args.arch, ranks=args.ranks,
                        families=args.families.split(",") if args.families else None,
                        dtypes=args.dtypes.split(",") if args.dtypes else None,
                        progress=not args.quiet, jobs=args.jobs, force=args.force)
    except (ValueError, TypeError) as exc:
        ap.error(str(exc))
    except KernelCompileError as exc:
        print(exc, file=sys.stderr)
        return 1
    except NvrtcUnavailable as exc:
        print(f"cannot build: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(format_report(reports))
        print(f"\n{len(reports)} kernels in {cache.cache_dir()}")
    return 0
