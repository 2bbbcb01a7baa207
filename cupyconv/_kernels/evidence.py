"""The hardware-evidence ledger: which kernel configurations, launch paths and library
calls a real GPU has shown right, and the filter that keeps ``method="auto"`` to them.

A configuration (:class:`~.kernel_config.KernelConfig`) is a kernel family, its tile
variant, its math, dtype, index width and the device's arch class (:data:`ARCH_CLASSES`).
Its evidence is "verified on hardware" (GPU, date, commit, the result files under
``docs/benchmarks/``) or "emulator only".  :data:`VERIFIED` is the committed table: each
row a pattern of configurations and the run that showed them right.  A SIMT kernel (no
tensor-core or arch-specific instruction) shown right on one sm_80+ GPU stands for every
sm_80+ class (its code does not change with the class); tensor-core and sm_90a
configurations are per class.  ``python -m benchmarks.promote_evidence`` adds the rows a
device check passed (docs/evidence.md).

The filter (:func:`verified_only`): under ``cupyconv.config.kernels = "auto"`` (default)
a GPU chooses among verified configurations only and the emulator among all (its runs
are its evidence); ``"verified"`` filters everywhere (the CPU stand-ins of a device),
``"all"`` nowhere.  An explicit ``method=``/``tile=`` or ``"all"`` runs an unverified
configuration with a one-time warning (:func:`warn_unverified`).
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Optional, Tuple

import numpy as np

from .. import config
from .._lru import cached
from . import registry
from .kernel_config import family_config, gemm_config

__all__ = ["ARCH_CLASSES", "Run", "Row", "RUNS", "VERIFIED", "LAUNCH_PATHS", "LIBRARY_CALLS",
           "arch_class", "library_runs", "evidence_of", "is_verified", "verified_only", "warns",
           "FILTER", "warn_unverified", "status_line", "forget_warnings", "configurations",
           "ledger_lines"]

#: The arch classes a configuration is recorded for: compute capability 8.x, 9.0 with the
#: portable cubins, 9.0 with the arch-specific (wgmma) ones.
ARCH_CLASSES = ("sm_80-89", "sm_90", "sm_90a")
#: The classes a SIMT kernel verified on any of them stands for.
_SIMT_CLASSES = ("sm_80-89", "sm_90")


@dataclasses.dataclass(frozen=True)
class Run:
    """One device check on real hardware whose result files are committed."""

    gpu: str
    date: str
    commit: str
    result: str


#: The real-GPU runs the ledger cites (docs/benchmarks/gpu_h200_*/README.md).
RUNS = {
    "h200-2026-11-30": Run("NVIDIA H200", "2026-11-30", "78d52a4",
                           "docs/benchmarks/gpu_h200_2026-11-30"),
    "h200-2026-12-01": Run("NVIDIA H200", "2026-12-01", "4c9ac62",
                           "docs/benchmarks/gpu_h200_2026-12-01/first_run"),
}


@dataclasses.dataclass(frozen=True)
class Row:
    """A verified pattern: ``families`` with tile ``variants`` (``None``: any; the
    direct kernel's tiles are not variants) and ``tiles``, ``dtypes`` (``None``: any but ``not_dtypes``),
    index widths in bits, the arch classes, and the :data:`RUNS` key that showed it."""

    families: Tuple[str, ...]
    variants: Optional[Tuple[int, ...]]
    dtypes: Optional[Tuple[str, ...]]
    not_dtypes: Tuple[str, ...]
    index_bits: Tuple[int, ...]
    arch: Tuple[str, ...]
    run: str
    #: ``(BM, BN, BK)`` tiles of the variants (``None``: every tile).
    tiles: Optional[Tuple[Tuple[int, ...], ...]] = None


#: What the two H200 runs showed right, by their committed files (glue smoke, reference
#: layers, Winograd table, quick suite): 32-bit indices only (no case passed 2**31).
VERIFIED = (
    Row(("vol2col", "col2vol"), None, None, (), (32,), _SIMT_CLASSES, "h200-2026-12-01"),
    Row(("direct_conv",), None, None, ("bfloat16",), (32,), _SIMT_CLASSES, "h200-2026-12-01"),
    Row(("implicit_gemm_fprop",), (0, 1), None, (), (32,), _SIMT_CLASSES, "h200-2026-12-01"),
    Row(("winograd_input", "winograd_output", "winograd_weights"), None, None, (), (32,),
        _SIMT_CLASSES, "h200-2026-12-01"),
)

#: Launch paths: the :data:`RUNS` key that showed each right, or ``None``.
LAUNCH_PATHS = {"RawKernel call": "h200-2026-11-30", "compiled replay": None,
                "prebuilt driver launch": None, "CUDA graph": None}
#: Library calls: the :data:`RUNS` key that showed each right, or ``None``.
LIBRARY_CALLS = {"cuFFT": "h200-2026-11-30", "cupy.matmul": "h200-2026-11-30",
                 "cuBLAS strided-batched": None}


@cached(maxsize=64, keep=True)
def arch_class(arch: int, arch_specific: bool = False) -> str:
    """The :data:`ARCH_CLASSES` entry of compute capability ``arch`` (``XY``);
    ``arch_specific``: the sm_90a cubins (memoised: a constant the choice asks per
    record)."""
    if arch >= 90:
        return "sm_90a" if arch_specific else "sm_90"
    return "sm_80-89"


def _matches(row, cfg):
    dtype = cfg.dtype
    return (cfg.family in row.families
            and (row.variants is None or cfg.variant in row.variants)
            and (row.tiles is None or tuple(cfg.tile) in row.tiles)
            and (row.dtypes is None or dtype in row.dtypes) and dtype not in row.not_dtypes
            and (64 if cfg.index64 else 32) in row.index_bits and cfg.arch in row.arch)


def evidence_of(cfg) -> Optional[Run]:
    """The :class:`Run` that showed ``cfg`` (a :class:`~.kernel_config.KernelConfig`)
    right, ``None`` when it is emulator only (every kernel it launches must be verified,
    and its library call)."""
    run = None
    for part in ((cfg,) if cfg.family else ()) + tuple(cfg.companions):
        rows = [r for r in VERIFIED if _matches(r, part)]
        if not rows:
            return None
        run = run or RUNS[rows[0].run]
    if cfg.library is not None:
        key = LIBRARY_CALLS.get(cfg.library)
        if key is None:
            return None
        run = run or RUNS[key]
    return run


def is_verified(cfg) -> bool:
    """Whether :func:`evidence_of` ``cfg`` is a hardware run."""
    return evidence_of(cfg) is not None


def status_line(cfg) -> str:
    """``"verified: <GPU> <date> <commit> (<result>)"`` or ``"emulator only"``."""
    return _status(evidence_of(cfg))


def _status(run):
    if run is None:
        return "emulator only"
    return f"verified: {run.gpu} {run.date} {run.commit} ({run.result})"


#: ``(config.kernels, hardware) -> (verified_only, warns)``: :func:`verified_only` and
#: :func:`warns` as one table (the cost model reads it on every candidate it prices).
FILTER = {(mode, hardware): (mode == "verified" or (mode == "auto" and hardware),
                             mode != "auto" or hardware)
          for mode in ("auto", "verified", "all") for hardware in (False, True)}


def verified_only(hardware: bool) -> bool:
    """Whether the automatic choice keeps to verified configurations on a device
    (``hardware``: a GPU, not the CPU emulator or a stand-in of a device):
    ``config.kernels`` ``"verified"``, or ``"auto"`` on a GPU."""
    return FILTER[config.kernels, bool(hardware)][0]


def library_runs(name: str, hardware: bool) -> bool:
    """Whether the library call ``name`` (:data:`LIBRARY_CALLS`) may run where the filter
    (:func:`verified_only`) keeps to verified calls."""
    return LIBRARY_CALLS.get(name) is not None or not verified_only(hardware)


def warns(hardware: bool) -> bool:
    """Whether running an unverified configuration warns: on a GPU, or wherever
    ``config.kernels`` is set (``"verified"`` or ``"all"``)."""
    return FILTER[config.kernels, bool(hardware)][1]


_WARNED = set()


def warn_unverified(cfg, why: str) -> None:
    """Warn once per configuration that ``cfg`` runs without hardware evidence
    (``why``: what opted in)."""
    if cfg in _WARNED or is_verified(cfg):
        return
    _WARNED.add(cfg)
    warnings.warn(f"running {cfg.describe()}, which has no hardware evidence (emulator only; "
                  f"{why}); `python -m cupyconv info --kernels` lists the ledger",
                  RuntimeWarning, stacklevel=3)


def forget_warnings() -> None:
    """Warn again for every configuration (tests; ``cupyconv.clear``)."""
    _WARNED.clear()


#: The configurations the ledger lists per family without tile variants.
_PLAIN_FAMILIES = ("direct_conv", "vol2col", "col2vol", "winograd_input", "winograd_output",
                   "winograd_weights", "relayout_channels_last", "splitk_reduce")
#: The dtypes the ledger lists (the floating types ``auto`` picks kernels for).
_LEDGER_DTYPES = ("float32", "float64", "float16", "bfloat16")


def configurations():
    """Every kernel configuration ``auto`` can pick, as :class:`~.kernel_config.KernelConfig`
    records: each implicit-GEMM tile (wgmma on sm_90a only) and each family without tile
    variants, per ledger dtype the family is compiled for, index width and arch class."""
    out = []
    for dtype in _LEDGER_DTYPES:
        if dtype not in registry.DTYPES:
            continue
        tiles = [(t, ("sm_80-89", "sm_90")) for t in registry.gemm_tiles(dtype)]
        tiles += [(t, ("sm_90a",)) for t in registry.wgmma_tiles(dtype)]
        for tile, classes in tiles:
            for arch in classes:
                for index64 in (False, True)[:1 + registry.tile_index64(tile)]:
                    out.append(gemm_config(tile, dtype, arch, index64))
        for family in _PLAIN_FAMILIES:
            if not _compiled(family, dtype):
                continue
            for arch in _SIMT_CLASSES:
                for index64 in (False, True):
                    out.append(family_config(_ALGORITHM[family], family, dtype, arch, index64))
    return out


_ALGORITHM = {"direct_conv": "direct", "vol2col": "gemm", "col2vol": "gemm",
              "winograd_input": "winograd", "winograd_output": "winograd",
              "winograd_weights": "winograd", "relayout_channels_last": "implicit_gemm",
              "splitk_reduce": "implicit_gemm"}


def _compiled(family, dtype):
    """Whether ``family`` has instances of ``dtype`` (rank 2 stands for every rank)."""
    return any(np.dtype(i.dtype).name == dtype for i in registry.instantiations([family]))


def ledger_lines():
    """The whole ledger, one line a configuration, launch path and library call, each
    with its :func:`status_line`."""
    lines = [f"{cfg.describe()}: {status_line(cfg)}" for cfg in configurations()]
    for kind, table in (("launch path", LAUNCH_PATHS), ("library call", LIBRARY_CALLS)):
        for name, key in table.items():
            lines.append(f"{kind} {name}: {_status(RUNS.get(key))}")
    return lines
