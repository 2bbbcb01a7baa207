"""One kernel configuration as a frozen record: what the cost model prices, what the
launcher builds, what ``plan.explain()`` prints and what the evidence ledger
(:mod:`.evidence`) holds.

:class:`KernelConfig` names the kernel family, its tile (an implicit-GEMM tile
``(BM, BN, BK)`` and its variant, or the direct kernel's output tile), its math (FMA,
DMMA, TF32, HMMA, wgmma), the operand layout it reads, its pipeline stages, dtype, index
width, which operands are re-laid channels-last first, the weight gradient's split-K
and the device's arch class; ``companions`` are the further kernels one call launches
(the re-layout, vol2col, the split-K reduction) and ``library`` the library call
(cuFFT, ``cupy.matmul``, cuBLAS strided-batched).  The backend's one selection
(each algorithm class's ``kernel_config`` in ``backends/cuda/table.py``) returns it.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Optional, Tuple

import numpy as np

from .._lru import cached
from . import registry

__all__ = ["KernelConfig", "tile_math", "gemm_config", "family_config"]


def tile_math(tile, dtype) -> str:
    """The arithmetic of an implicit-GEMM ``tile`` on ``dtype``: ``"FMA"``, ``"DMMA"``
    (float64 tensor cores), ``"TF32"``, ``"HMMA"`` (float16/bfloat16) or ``"wgmma"``."""
    math = registry.tile_variant(tile).math
    if math != "mma":
        return math if math == "wgmma" else "FMA"
    kind = np.dtype(dtype)
    if kind == np.float64:
        return "DMMA"
    return "TF32" if kind == np.float32 else "HMMA"


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    """One kernel configuration (module docstring).  ``variant`` is ``None`` for families
    without tile variants; ``tile`` is ``(BM, BN, BK)`` or the direct kernel's output
    tile; ``relayout`` ``(x, w)``: operands re-laid channels-last before the launch."""

    algorithm: str
    family: str
    dtype: str
    arch: str
    variant: Optional[int] = None
    tile: Tuple[int, ...] = ()
    math: str = "FMA"
    layout: str = "channels_first"
    stages: int = 1
    index64: bool = False
    relayout: Tuple[bool, bool] = (False, False)
    splits: int = 1
    companions: Tuple["KernelConfig", ...] = ()
    library: Optional[str] = None

    @functools.cached_property
    def gemm_tile(self) -> Tuple[int, ...]:
        """The registry's 4-tuple ``(BM, BN, BK, variant)`` of an implicit-GEMM config
        (computed once per record: the records are memoised, :func:`gemm_config`)."""
        return tuple(self.tile) + (self.variant,)

    def describe(self) -> str:
        """One line: family, tile, math, layout, stages, dtype, index width, arch class,
        and what else the call runs."""
        parts = [self.family or self.library]
        if self.tile:
            parts.append("x".join(map(str, self.tile))
                         + ("" if self.variant is None else f" variant {self.variant}"))
        parts += [p for p in (self.math, self.layout) if p]
        if self.stages > 1:
            parts.append(f"{self.stages} stages")
        parts += [self.dtype, "64-bit index" if self.index64 else "32-bit index", self.arch]
        relaid = [n for n, r in zip(("x", "w"), self.relayout) if r]
        if relaid:
            parts.append("re-lays " + " and ".join(relaid))
        if self.splits > 1:
            parts.append(f"split-K {self.splits}")
        extra = [c.family for c in self.companions] + (
            [self.library] if self.library and self.family else [])
        if extra:
            parts.append("with " + ", ".join(extra))
        return ", ".join(parts)


def family_config(algorithm, family, dtype, arch, index64=False, **fields) -> KernelConfig:
    """A :class:`KernelConfig` of a family without tile variants."""
    return KernelConfig(algorithm, family, np.dtype(dtype).name, arch, index64=bool(index64),
                        **fields)


@cached(maxsize=1024)
def gemm_config(tile, dtype, arch, index64=False, relayout=(False, False), splits=1,
                algorithm="implicit_gemm") -> KernelConfig:
    """The :class:`KernelConfig` of the implicit-GEMM ``tile`` (``(BM, BN, BK, variant)``)
    with its re-layout and split-K kernels as companions (memoised: a tuple ``tile`` and
    ``relayout``)."""
    tile = tuple(tile)
    name = np.dtype(dtype).name
    companions = []
    if any(relayout):
        companions.append(family_config(algorithm, "relayout_channels_last", dtype, arch,
                                        index64))
    if splits > 1:
        companions.append(family_config(algorithm, "splitk_reduce", dtype, arch, index64))
    variant = registry.tile_variant(tile)
    return KernelConfig(
        algorithm, variant.family, name, arch, variant.number, tile[:3],
        tile_math(tile, dtype), "channels_last" if variant.channels_last else "channels_first",
        registry.tile_stages(tile), bool(index64), tuple(bool(r) for r in relayout), int(splits),
        tuple(companions))
