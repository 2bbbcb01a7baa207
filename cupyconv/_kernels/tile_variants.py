"""The implicit GEMM's tiles ``(BM, BN, BK, variant)`` and what each variant stands for
(:class:`TileVariant`): family, math, alignment, operand layout, pipeline stages, index
widths.  The variant stays the kernels' last template argument (and so part of their
names); the launcher, the cost model and :class:`~.kernel_config.KernelConfig` read the
descriptor's fields.  :mod:`.registry` re-exports every name.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Tuple

import numpy as np

from .._dtypes import is_half_float
from .._lru import cached

__all__ = ["MULTISTAGE", "WGMMA", "WGMMA_STAGES", "gemm_tiles", "least_tile_n", "FMA_DMMA_VARIANTS",
           "FMA_DMMA_CHANNELS_LAST", "TileVariant", "TILE_VARIANTS", "tile_variant",
           "channels_last_twin", "tile_index64", "gemm_family", "tile_stages",
           "tensor_core_variant", "tensor_core_tile", "gemm_tile_fits", "wgmma_tiles",
           "multistage_stages", "multistage_smem_bytes", "checked_tile", "asks_layout",
           "is_multistage"]

#: Tile variant of the multistage implicit GEMM (family ``implicit_gemm_multistage``).
MULTISTAGE = 4
#: Tile variant of the warpgroup-MMA implicit GEMM (family ``implicit_gemm_wgmma``, sm_90a).
WGMMA = 8
#: K-tiles in flight of the wgmma tiles (4 x 32 KiB for 128x128: one CTA per SM; 4 x 24 KiB
#: for 128x64: two).
WGMMA_STAGES = 4


@cached(maxsize=64, keep=True)
def gemm_tiles(dtype) -> Tuple[Tuple[int, int, int, int], ...]:
    """CTA tiles (BM, BN, BK, VARIANT) compiled for the implicit GEMM, preferred first.

    ``VARIANT`` 1 is the tap-aligned variant for ``C/G % BK == 0`` (every K-slice in one
    weight tap: the boundary remap leaves the hot loop), float32's compiled for two
    resident CTAs per SM; 2 is tap-aligned with tensor-core math, the atom of the dtype
    (float64 DMMA m8n8k4, float32 TF32 m16n8k8 -- only under ``precision="tf32"`` --,
    float16 m16n8k16 with float accumulation; sm_80+ devices only: the launcher takes
    them when told the device has them, see :func:`tensor_core_tile`); 3 is variant 2 on
    channels-last operands read by 16-byte copies (the launcher takes it for a variant-2
    tile when the operands' strides and addresses allow); 4 (:data:`MULTISTAGE`) is the
    multistage main loop of family ``implicit_gemm_multistage`` (channels-last operands,
    K-tiles of 128 bytes: BK 32 for TF32, 64 for float16 and bfloat16,
    :func:`multistage_stages` of them in swizzled dynamic shared memory, 64x64 warp tiles in the 128x128 tile, 32x32
    in the small one; the launcher takes it for a chosen variant-2 tile); 0 is the general
    variant (any channel count); 5, 6 and 7 are the multistage FMA and DMMA tiles of the
    family ``implicit_gemm_fma_dmma`` (:data:`FMA_DMMA_VARIANTS`): float32 FMA 128x128x16
    and float64 DMMA 128x64x16 (m8n8k4; 7: the sm_90 m16n8k16 atom), three cp.async stages
    in dynamic shared memory.  float32 has a 128x128 aligned FMA tile (8x8 outputs per
    thread: twice the math per gathered element of 128x64); float64's tap-aligned FMA
    tiles stop at 128x64, whose 8x4 float64 block already fills the 128 registers a thread
    may have at two resident CTAs.  The float64 DMMA tile is 128x64 for two CTAs per SM:
    128x128 doubles of accumulators alone are 32,768 registers, half an sm_80/sm_90 SM's
    register file, so two such CTAs cannot fit; 128x64 is 16,384 (4 warps of 255 registers,
    two CTAs fill the file).
    """
    if np.dtype(dtype) == np.float32:
        return ((128, 128, 16, 5), (128, 128, 8, 1), (128, 64, 8, 1), (64, 64, 8, 1), (128, 64, 8, 0), (64, 64, 8, 0),
                (128, 128, 8, 2), (64, 64, 8, 2), (128, 128, 8, 3), (64, 64, 8, 3),
                (128, 128, 32, MULTISTAGE), (64, 64, 32, MULTISTAGE))
    if np.dtype(dtype) == np.float64:
        return ((128, 64, 16, 6), (64, 64, 8, 2), (128, 64, 8, 1), (64, 64, 8, 1), (64, 64, 8, 0), (64, 64, 8, 3),
                (128, 64, 16, 7), (128, 64, 16, 9), (128, 64, 16, 10))
    if is_half_float(dtype):     # float16 and bfloat16: the m16n8k16 atoms
        return ((128, 128, 16, 2), (64, 64, 16, 2), (64, 64, 8, 0), (128, 128, 16, 3),
                (64, 64, 16, 3), (128, 128, 64, MULTISTAGE), (64, 64, 64, MULTISTAGE))
    return ((64, 64, 8, 0),)


@cached(maxsize=64, keep=True)
def least_tile_n(dtype) -> int:
    """The least BN of :func:`gemm_tiles` of ``dtype`` (the most column tiles a launch
    may need)."""
    return min(t[1] for t in gemm_tiles(dtype))


#: The multistage FMA and DMMA tiles (issue 26 items 3, 4): tile variant -> (stages, TILE_M, TILE_N,
#: math) of ``implicit_gemm_fma_dmma`` (``cuda_src/conv/implicit_gemm_fma_dmma.cu``).
#: TILE_M x TILE_N is the warp tile of an MMA atom, or the thread's register block of
#: ``cc::SimtFma``.  Variant 5: float32 FMA 128x128x16, 3 stages, 8x8 outputs per thread
#: (48 KiB, 256 threads); variant 6: float64 DMMA m8n8k4 128x64x16, 3 stages, 32x64 warp
#: tiles, one warp each (128 threads, 72 KiB opted in past 48 KiB: two CTAs per SM);
#: variant 7: the same tile on the sm_90 m16n8k16 float64 atom (DMMA.16x8x16; below sm_90
#: it traps, so only an explicit ``tile=`` takes it: the launcher is not told the arch).
#: Variants 9 and 10: 6 and 7 on channels-last operands (x ``(N, *S, C)``, w KRSC), read by
#: 16-byte cp.async of two consecutive channels (the launcher takes them for a chosen 6 or
#: 7 when :func:`launch.channels_last_reason` accepts the operands: 1 L2 sector fetched per
#: sector used, where the KCRS weights of 6 and 7 fetch 4).
#: The MMA tiles' block size is :func:`block_threads` of the tile.
FMA_DMMA_VARIANTS: Dict[int, Tuple[int, int, int, str]] = {
    5: (3, 8, 8, "cc::SimtFma"),
    6: (3, 32, 64, "cc::MmaF64_m8n8k4"),
    7: (3, 32, 64, "cc::MmaF64_m16n8k16"),
    9: (3, 32, 64, "cc::MmaF64_m8n8k4"),
    10: (3, 32, 64, "cc::MmaF64_m16n8k16"),
}

#: The channels-last DMMA variants, each with the channels-first variant it stands in for.
FMA_DMMA_CHANNELS_LAST: Dict[int, int] = {9: 6, 10: 7}


@dataclasses.dataclass(frozen=True)
class TileVariant:
    """What the last entry of an implicit-GEMM tile ``(BM, BN, BK, variant)`` stands for
    (the kernels' template argument and name keep the number; the launcher, the cost
    model and :class:`~.kernel_config.KernelConfig` read these fields).

    ``family``: the kernel family that runs it; ``math``: ``"fma"``, ``"mma"``
    (``mma.sync`` tensor-core atoms) or ``"wgmma"``; ``aligned``: tap-aligned, it needs
    ``C/G % BK == 0``; ``channels_last``: it reads channels-last operands by 16-byte
    copies; ``twin``: the channels-last variant of the same family that runs it on such
    operands; ``stages``: shared-memory pipeline stages (``None``: by the tile's size,
    :func:`multistage_stages`); ``index64``: it has a 64-bit-index build; ``atom`` and
    ``warp_tile``: the FMA/DMMA family's math class and its ``(TILE_M, TILE_N)`` (template
    arguments, :data:`FMA_DMMA_VARIANTS`)."""

    number: int
    family: str
    math: str = "fma"
    aligned: bool = True
    channels_last: bool = False
    twin: Optional[int] = None
    stages: Optional[int] = 1
    index64: bool = True
    atom: str = ""
    warp_tile: Tuple[int, ...] = ()
    #: Whether it computes on the ``mma.sync`` tensor-core atoms (``math == "mma"``).
    tensor_cores: bool = dataclasses.field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "tensor_cores", self.math == "mma")


def _fma_dmma_variant(number, index64=True):
    """The FMA/DMMA family's variant ``number``; its twin from
    :data:`FMA_DMMA_CHANNELS_LAST`."""
    stages, tile_m, tile_n, atom = FMA_DMMA_VARIANTS[number]
    twin = next((cl for cl, cf in FMA_DMMA_CHANNELS_LAST.items() if cf == number), None)
    return TileVariant(number, "implicit_gemm_fma_dmma", "fma" if atom == "cc::SimtFma" else "mma",
                       channels_last=number in FMA_DMMA_CHANNELS_LAST, twin=twin, stages=stages,
                       index64=index64, atom=atom, warp_tile=(tile_m, tile_n))


#: Every tile variant (:func:`gemm_tiles`, :func:`wgmma_tiles`).  Variant 7's m16n8k16
#: fragments spilled with 64-bit indices on the 128x128 8-warp tile it had first (ptxas
#: 12.9: 96 bytes), so it is compiled for ``int`` only (and so is its twin, 10).
TILE_VARIANTS: Dict[int, TileVariant] = {v.number: v for v in (
    TileVariant(0, "implicit_gemm_fprop", aligned=False),
    TileVariant(1, "implicit_gemm_fprop"),
    TileVariant(2, "implicit_gemm_fprop", "mma", twin=3),
    TileVariant(3, "implicit_gemm_fprop", "mma", channels_last=True),
    TileVariant(MULTISTAGE, "implicit_gemm_multistage", "mma", channels_last=True, stages=None),
    _fma_dmma_variant(5),
    _fma_dmma_variant(6),
    _fma_dmma_variant(7, index64=False),
    TileVariant(WGMMA, "implicit_gemm_wgmma", "wgmma", channels_last=True, stages=WGMMA_STAGES),
    _fma_dmma_variant(9),
    _fma_dmma_variant(10, index64=False),
)}


@cached(maxsize=1024, keep=True)
def tile_variant(tile: Tuple[int, ...]) -> TileVariant:
    """The :class:`TileVariant` of an implicit-GEMM ``tile`` (its last entry)."""
    return TILE_VARIANTS[tile[3]]


@cached(maxsize=1024, keep=True)
def channels_last_twin(tile: Tuple[int, ...]) -> Optional[Tuple[int, ...]]:
    """The channels-last float64 DMMA tile that runs in place of ``tile`` (variant 6 or 7)
    on channels-last operands (variants 9 and 10), or ``None`` for any other tile."""
    variant = TILE_VARIANTS[tile[3]]
    if variant.family != "implicit_gemm_fma_dmma" or variant.twin is None:
        return None
    return tuple(tile[:3]) + (variant.twin,)


@cached(maxsize=1024, keep=True)
def tile_index64(tile: Tuple[int, ...]) -> bool:
    """Whether ``tile`` has a 64-bit-index build (:attr:`TileVariant.index64`)."""
    return TILE_VARIANTS[tile[3]].index64


@cached(maxsize=1024, keep=True)
def gemm_family(tile: Tuple[int, ...]) -> str:
    """The kernel family that runs an implicit-GEMM ``tile`` of :func:`gemm_tiles`
    (:attr:`TileVariant.family`): ``implicit_gemm_fma_dmma`` for
    :data:`FMA_DMMA_VARIANTS`, ``implicit_gemm_multistage`` for variant
    :data:`MULTISTAGE`, ``implicit_gemm_wgmma`` for :data:`WGMMA`, else
    ``implicit_gemm_fprop``."""
    return TILE_VARIANTS[tile[3]].family


@cached(maxsize=1024, keep=True)
def tile_stages(tile: Tuple[int, ...]) -> int:
    """Shared-memory pipeline stages of ``tile`` (1: registers only)."""
    stages = TILE_VARIANTS[tile[3]].stages
    return multistage_stages(tile) if stages is None else stages


def tensor_core_variant(variant: int) -> bool:
    """Whether tile variant ``variant`` computes on the ``mma.sync`` tensor-core atoms (2,
    3, 4, 6, 7, 9, 10: :attr:`TileVariant.tensor_cores`)."""
    return TILE_VARIANTS[variant].tensor_cores


@cached(maxsize=1024, keep=True)
def tensor_core_tile(tile: Tuple[int, ...], dtype, mma: bool, tf32: bool) -> bool:
    """Whether ``tile`` may run: its tensor-core variant needs a device with the atoms
    (``mma``), and float32's TF32 atom also ``precision="tf32"`` (``tf32``); every other
    tile may (the FMA multistage tile too: below sm_80 its copies are plain loads)."""
    if not TILE_VARIANTS[tile[3]].tensor_cores:
        return True
    return mma and (tf32 or np.dtype(dtype) != np.float32)


@cached(maxsize=1024, keep=True)
def gemm_tile_fits(tile: Tuple[int, ...], cpg: int) -> bool:
    """Whether ``tile`` can run a problem with ``cpg`` input channels per group (the
    tap-aligned variants, all but 0, need ``cpg % BK == 0``)."""
    return not TILE_VARIANTS[tile[3]].aligned or cpg % tile[2] == 0


def wgmma_tiles(dtype) -> Tuple[Tuple[int, int, int, int], ...]:
    """The tiles (BM, BN, BK, :data:`WGMMA`) of family ``implicit_gemm_wgmma``: 128x128 and
    128x64, BK 32 for float32 (TF32) and 64 for float16 and bfloat16 (a 128-byte K-tile
    row); ``()`` for the other dtypes."""
    dt = np.dtype(dtype)
    if dt == np.float32 or is_half_float(dt):
        bk = 128 // dt.itemsize
        return ((128, 128, bk, WGMMA), (128, 64, bk, WGMMA))
    return ()


def multistage_stages(tile: Tuple[int, ...]) -> int:
    """K-tiles in flight of a multistage tile: 3 for 128x128 (96 KiB: two CTAs fit an
    sm_90 SM's 227 KiB), 4 for the small tiles (64 KiB)."""
    return 3 if tile[0] * tile[1] >= 128 * 128 else 4


def multistage_smem_bytes(tile: Tuple[int, ...]) -> int:
    """Dynamic shared memory of a multistage tile: stages x (BM + BN) rows of 128 bytes
    (``cuda_src/conv/implicit_gemm_multistage.cu``)."""
    return multistage_stages(tile) * (tile[0] + tile[1]) * 128


def checked_tile(dtype, tile) -> Tuple[int, ...]:
    """``tile`` as a tuple; ``ValueError`` unless it is a tile of :func:`gemm_tiles` of
    ``dtype`` (an explicit tile, checked once before its variant is read)."""
    tile, tiles = tuple(tile), gemm_tiles(dtype)
    if tile not in tiles:
        raise ValueError(f"tile {tile} is not compiled for {np.dtype(dtype).name}; "
                         f"choose from {tiles}")
    return tile


@cached(maxsize=1024, keep=True)
def asks_layout(tile) -> bool:
    """Whether the launch of ``tile`` asks whether its operands are channels-last
    (``launch.channels_last_reason``): a channels-last variant (3, the multistage 4, the
    float64 DMMA twins 9 and 10: the launcher takes them in place of a chosen tile, never
    chooses them itself) or a tile with a channels-last twin (2: 3 and the multistage 4;
    the float64 DMMA 6, 7: 9, 10)."""
    variant = TILE_VARIANTS[tile[3]]
    return variant.channels_last or variant.twin is not None


@cached(maxsize=1024, keep=True)
def is_multistage(tile) -> bool:
    """Whether ``tile`` is a multistage tile (family ``implicit_gemm_multistage``)."""
    return TILE_VARIANTS[tile[3]].family == "implicit_gemm_multistage"
