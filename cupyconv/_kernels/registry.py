"""The one declared table of CUDA kernel families and their instantiations.

Both the ahead-of-time builder (:mod:`cupyconv._compile`) and the runtime
launchers (:mod:`cupyconv._kernels.launch`) derive NVRTC name expressions
from this table, so a kernel that is built is exactly a kernel that is
launched.  A name expression spells out the whole specialisation::

    vol2col<float, 3, int>
    col2vol<cc::complex<double>, 5, long long>
    implicit_gemm_fprop<float, float, 3, int, 128, 64, 8, 1>  # T, Acc, R, Index, BM, BN, BK, VARIANT
    implicit_gemm_multistage<float, float, 3, int, 128, 128, 32, 3>  # ..., BM, BN, BK, STAGES
    direct_conv<double, double, 2, int, 16, 64>               # T, Acc, R, Index, TILE_H, TILE_W
    winograd_input<cc::half, float, 3, int, 8>                # T, Acc (compute), R, Index, MAX_ALPHA
    relayout_channels_last<float, float, 3, int>              # TIn, TOut, R, Index
    splitk_reduce<float, float, 3, int>                       # T, Acc, R (unused), Index

Instantiations are compiled in *groups* of one source file, one element
type and one rank (both index types and every tile in one NVRTC program),
which is also the unit of the on-disk cubin cache.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

import numpy as np

from .._dtypes import LazyTable, bfloat16, is_bfloat16, is_half_float
from .._paths import cuda_src_dir
from .._lru import cached, memoized
from .._vocabulary import MAX_RANK
from .families import (CONV_PARAMS, RELAYOUT_PARAMS, SCAN_PARAMS, SPLITK_REDUCE_PARAMS,
                       WINOGRAD_PIECE, WINOGRAD_WEIGHTS, KernelFamily)

__all__ = [
    "DtypeSpec", "KernelFamily", "Instantiation", "DTYPES", "FAMILIES",
    "MAX_RANK", "THREADS", "DIRECT_TAP_BLOCK", "LAUNCH_CONFIG_HEADER", "read_block_threads",
    "read_define", "dtype_spec",
    "name_expression", "gemm_tiles", "gemm_tile_fits", "FMA_DMMA_VARIANTS", "FMA_DMMA_CHANNELS_LAST",
    "channels_last_twin", "gemm_family",
    "gemm_dynamic_smem", "tensor_core_variant", "tile_index64", "MULTISTAGE",
    "MULTISTAGE_THREADS", "multistage_stages", "multistage_smem_bytes", "block_threads",
    "direct_tiles", "WINOGRAD_MAX_ALPHA", "RELAYOUT_DTYPES", "SPLITK_DTYPES", "WGMMA", "WGMMA_THREADS",
    "WGMMA_STAGES", "wgmma_tiles",
    "winograd_tiles", "instantiations", "group_instantiations",
    "lookup",
]

#: The header that defines the block size of every kernel, relative to ``cuda_src/``.
LAUNCH_CONFIG_HEADER = "common/launch_config.cuh"
def _define_re(name):
    return re.compile(
        rf"^[ \t]*#[ \t]*define[ \t]+{name}(?:[ \t]+(\S+))?[ \t]*(?://.*|/\*.*\*/[ \t]*)?$",
        re.MULTILINE)


def read_define(name, path=None, lo=1, hi=1 << 20, multiple=1) -> int:
    """The integer ``#define name`` of the launch-config header (one place for the
    numbers the kernels and the launchers must agree on).

    Raises
    ------
    RuntimeError
        Naming the file, when it is unreadable or does not define ``name``
        exactly once as a plain decimal in ``[lo, hi]`` divisible by ``multiple``.
    """
    path = Path(cuda_src_dir() / LAUNCH_CONFIG_HEADER if path is None else path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise RuntimeError(f"cannot read the kernel launch configuration {path}: {exc}") from None
    found = _define_re(name).findall(text)
    if len(found) != 1:
        raise RuntimeError(
            f"{path} must contain exactly one '#define {name} <int>' line; found {len(found)}")
    value = found[0]
    if not re.fullmatch(r"[1-9][0-9]*", value):
        raise RuntimeError(f"{path}: {name} must be a plain decimal integer; got {value!r}")
    number = int(value)
    if number % multiple or not lo <= number <= hi:
        raise RuntimeError(f"{path}: {name} must be a multiple of {multiple} in [{lo}, {hi}]; "
                           f"got {number}")
    return number


def read_block_threads(path=None) -> int:
    """``CUPYCONV_BLOCK_THREADS`` as defined in the launch-config header.

    The kernels declare ``__launch_bounds__(CUPYCONV_BLOCK_THREADS)`` and trap
    on any other block shape, so the launchers take the block size from the
    same line of the same file (:func:`read_define`, a multiple of 32 in
    [32, 1024]).
    """
    return read_define("CUPYCONV_BLOCK_THREADS", path, lo=32, hi=1024, multiple=32)


#: Threads per block of every family, read from ``cuda_src/common/launch_config.cuh``
#: (the one definition; the kernels' ``__launch_bounds__`` and tile layouts use it).
THREADS = read_block_threads()
#: Kernel taps per register window of the direct kernel (its shared-memory rows are
#: padded by this many elements so a window never reads past its row's allocation).
DIRECT_TAP_BLOCK = read_define("CUPYCONV_DIRECT_TAP_BLOCK", lo=1, hi=32)
#: Threads per block of the multistage implicit GEMM (4 warps; the header's define).
MULTISTAGE_THREADS = read_define("CUPYCONV_MULTISTAGE_THREADS", lo=128, hi=128)
#: Threads per block of the wgmma implicit GEMM (a producer and two consumer warpgroups),
#: defined in its source.
WGMMA_THREADS = read_define("CUPYCONV_WGMMA_THREADS", cuda_src_dir() / "conv" / "implicit_gemm_wgmma.cu",
                            lo=384, hi=384)
#: Tile variant of the multistage implicit GEMM (family ``implicit_gemm_multistage``).
MULTISTAGE = 4
#: Tile variant of the warpgroup-MMA implicit GEMM (family ``implicit_gemm_wgmma``, sm_90a).
WGMMA = 8
#: K-tiles in flight of the wgmma tiles (4 x 32 KiB for 128x128: one CTA per SM; 4 x 24 KiB
#: for 128x64: two).
WGMMA_STAGES = 4


@dataclasses.dataclass(frozen=True)
class DtypeSpec:
    """C++ spelling of one supported element type."""

    #: numpy dtype of the arrays.
    dtype: np.dtype
    #: storage type ``T`` in the kernels.
    cpp: str
    #: accumulator type ``Acc`` (``cc::AccumType<T>::type``).
    accum: str
    #: bytes of one accumulator element (shared-memory sizing).
    accum_itemsize: int


def _dtype_specs():
    bf16 = bfloat16()
    return {spec.dtype.name: spec for spec in (
        DtypeSpec(np.dtype(np.float32), "float", "float", 4),
        DtypeSpec(np.dtype(np.float64), "double", "double", 8),
        DtypeSpec(np.dtype(np.complex64), "cc::complex<float>", "cc::complex<float>", 8),
        DtypeSpec(np.dtype(np.complex128), "cc::complex<double>", "cc::complex<double>", 16),
        DtypeSpec(np.dtype(np.int64), "long long", "long long", 8),
        DtypeSpec(np.dtype(np.float16), "cc::half", "float", 4),
        *([DtypeSpec(bf16, "cc::bfloat16", "float", 4)] if bf16 is not None else []),
    )}


#: dtype name -> :class:`DtypeSpec` (bfloat16 where ``ml_dtypes`` is installed; built on
#: first use, which imports it).
DTYPES: Mapping[str, DtypeSpec] = LazyTable(_dtype_specs)

_INDEX_CPP = {False: "int", True: "long long"}


#: The dtypes of the split-K reduction (``cuda_src/conv/splitk_reduce.cu``): those whose
#: implicit-GEMM tiles write their partial sums in the accumulation type (float32, TF32
#: included, and float64), so the split adds no rounding.  Its code is rank-independent;
#: ``R`` only places an instance in each rank's group (the unit of the caches and wheels).
SPLITK_DTYPES = frozenset({np.dtype(np.float32), np.dtype(np.float64)})

#: The dtypes of the re-layout kernel (``cuda_src/conv/relayout.cu``): those of the
#: channels-last tiles it lays operands out for (the multistage TF32 float32, float16 and
#: bfloat16 tiles; the float64 DMMA tiles 9 and 10, no rounding).
RELAYOUT_DTYPES = LazyTable(lambda: {d: d for d in (np.dtype(np.float32), np.dtype(np.float64),
                                                    np.dtype(np.float16), bfloat16())
                                      if d is not None})


@dataclasses.dataclass(frozen=True)
class Instantiation:
    """One compiled specialisation of a family."""

    family: str
    dtype: np.dtype
    rank: int
    index64: bool
    tile: Tuple[int, ...]
    name: str

    @property
    def source(self) -> str:
        """Source file of the family, relative to ``cuda_src/``."""
        return FAMILIES[self.family].source

    @property
    def group(self) -> Tuple[str, str, int]:
        """Compilation/cache unit: (source, dtype name, rank)."""
        return (self.source, self.dtype.name, self.rank)


@memoized(64)
def _dtype_spec(dtype) -> DtypeSpec:
    if isinstance(dtype, str) and dtype in DTYPES:   # "bfloat16" before ml_dtypes is loaded
        return DTYPES[dtype]
    dt = np.dtype(dtype)
    try:
        return DTYPES[dt.name]
    except KeyError:
        raise TypeError(
            f"the CUDA kernels support dtypes {sorted(DTYPES)}; got {dt.name}") from None


def dtype_spec(dtype) -> DtypeSpec:
    """Return the :class:`DtypeSpec` of ``dtype``.

    Raises
    ------
    TypeError
        If the kernels have no instantiation for ``dtype``.
    """
    return _dtype_spec(dtype)


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


def channels_last_twin(tile: Tuple[int, ...]) -> Optional[Tuple[int, ...]]:
    """The channels-last float64 DMMA tile that runs in place of ``tile`` (variant 6 or 7)
    on channels-last operands (variants 9 and 10), or ``None`` for any other tile."""
    for cl, cf in FMA_DMMA_CHANNELS_LAST.items():
        if tile[3] == cf:
            return tuple(tile[:3]) + (cl,)
    return None


def tile_index64(tile: Tuple[int, ...]) -> bool:
    """Whether ``tile`` has a 64-bit-index build: all but variant 7, whose m16n8k16 fragments
    spilled with 64-bit indices on the 128x128 8-warp tile it had first (ptxas 12.9: 96
    bytes), so it is compiled for ``int`` only (and so is its channels-last twin, 10)."""
    return tile[3] not in (7, 10)


def gemm_family(tile: Tuple[int, ...]) -> str:
    """The kernel family that runs an implicit-GEMM ``tile`` of :func:`gemm_tiles`:
    ``implicit_gemm_fma_dmma`` for :data:`FMA_DMMA_VARIANTS`, ``implicit_gemm_multistage``
    for variant :data:`MULTISTAGE`, else ``implicit_gemm_fprop``."""
    if tile[3] in FMA_DMMA_VARIANTS:
        return "implicit_gemm_fma_dmma"
    if tile[3] == WGMMA:
        return "implicit_gemm_wgmma"
    return "implicit_gemm_multistage" if tile[3] == MULTISTAGE else "implicit_gemm_fprop"


def gemm_dynamic_smem(tile: Tuple[int, ...], dtype) -> int:
    """Dynamic shared bytes a ``tile`` is launched with (0: static shared memory only):
    :func:`multistage_smem_bytes` for variant :data:`MULTISTAGE`, ``stages * (BM + BN) *
    BK`` elements for the FMA/DMMA multistage tiles (the kernels check it)."""
    if tile[3] == MULTISTAGE:
        return multistage_smem_bytes(tile)
    if tile[3] == WGMMA:   # the stages, and 1 KiB to align them to the 128-byte swizzle's pattern
        return WGMMA_STAGES * (tile[0] + tile[1]) * 128 + 1024
    if tile[3] not in FMA_DMMA_VARIANTS:
        return 0
    bm, bn, bk = tile[:3]
    return FMA_DMMA_VARIANTS[tile[3]][0] * (bm + bn) * bk * dtype_spec(dtype).dtype.itemsize


def tensor_core_variant(variant: int) -> bool:
    """Whether tile variant ``variant`` computes on tensor cores (2, 3, 4, 6, 7, 9, 10)."""
    return variant in (2, 3, MULTISTAGE, 6, 7, 9, 10)


def tensor_core_tile(tile: Tuple[int, ...], dtype, mma: bool, tf32: bool) -> bool:
    """Whether ``tile`` may run: its tensor-core variant needs a device with the atoms
    (``mma``), and float32's TF32 atom also ``precision="tf32"`` (``tf32``); every other
    tile may (the FMA multistage tile too: below sm_80 its copies are plain loads)."""
    if not tensor_core_variant(tile[3]):
        return True
    return mma and (tf32 or np.dtype(dtype) != np.float32)


def gemm_tile_fits(tile: Tuple[int, ...], cpg: int) -> bool:
    """Whether ``tile`` can run a problem with ``cpg`` input channels per group (the
    tap-aligned variants 1 and 2 need ``cpg % BK == 0``)."""
    return not tile[3] or cpg % tile[2] == 0


def block_threads(family: str, tile: Tuple[int, ...] = ()) -> int:
    """Threads per block of a family's kernels (of ``tile``'s, where the family's tiles
    differ: an MMA tile of :data:`FMA_DMMA_VARIANTS` has one warp per warp tile)."""
    if family == "implicit_gemm_fma_dmma" and tile and FMA_DMMA_VARIANTS[tile[3]][3] != "cc::SimtFma":
        _, tile_m, tile_n, _ = FMA_DMMA_VARIANTS[tile[3]]
        return 32 * (tile[0] // tile_m) * (tile[1] // tile_n)
    if family == "implicit_gemm_wgmma":
        return WGMMA_THREADS
    return MULTISTAGE_THREADS if family == "implicit_gemm_multistage" else THREADS


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


def direct_tiles(rank: int) -> Tuple[Tuple[int, int], ...]:
    """Output tiles (TILE_H, TILE_W) of the direct kernel for a rank, preferred first.

    The smaller tiles exist for large strides/dilations, whose input tile
    (``(TILE_H-1)*stride + span`` rows by ``(TILE_W-1)*stride + span`` columns)
    would not fit shared memory with the default one.
    """
    return ((1, 2048), (1, 256)) if rank == 1 else ((64, 64), (64, 32), (1, 256))


#: Largest ``alpha = m + r - 1`` per axis the Winograd transform kernels take (their
#: ``MAX_ALPHA``; every ``alpha`` in [2, 8] is specialised inside one kernel).  8 covers
#: every tile the default error gates allow (F(2, 7), F(4, 5), F(6, 3)); the CUDA path
#: plans larger-growth limits within it.
WINOGRAD_MAX_ALPHA = 8


def winograd_tiles(dtype) -> Tuple[Tuple[int, ...], ...]:
    """``((MAX_ALPHA,),)`` for the float and complex dtypes, ``()`` for int64 (Winograd's
    fractions would not keep integers exact)."""
    return () if dtype_spec(dtype).dtype.kind in "iu" else ((WINOGRAD_MAX_ALPHA,),)


def _gemm_tiles_of(family: str):
    def tiles(dtype, rank):
        return tuple(t for t in gemm_tiles(dtype) if gemm_family(t) == family)
    return tiles


def _direct_tiles(dtype, rank):
    return direct_tiles(rank)


def _winograd_tiles(dtype, rank):
    return winograd_tiles(dtype)


def _untiled_as_winograd(dtype, rank):
    """One instance for the dtypes of the Winograd transforms (the float and complex ones)."""
    return ((),) if winograd_tiles(dtype) else ()


def _fma_dmma_fields(tile):
    fields = dict(zip(("stages", "tile_m", "tile_n", "math"), FMA_DMMA_VARIANTS[tile[3]]))
    fields["cl"] = "true" if tile[3] in FMA_DMMA_CHANNELS_LAST else "false"
    return fields


def _multistage_fields(tile):
    return {"stages": multistage_stages(tile)}


def _wgmma_fields(tile):
    return {"stages": WGMMA_STAGES}


_CONV = (CONV_PARAMS,)

#: The kernel families, one record each (:class:`~.families.KernelFamily`).
FAMILIES: Dict[str, KernelFamily] = {
    fam.name: fam for fam in (
        KernelFamily("vol2col", "conv/vol2col.cu", "vol2col<{T}, {R}, {I}>", False, False,
                     bfloat16=True, params=_CONV),
        KernelFamily("col2vol", "conv/col2vol.cu", "col2vol<{T}, {R}, {I}>", False, False,
                     params=_CONV),
        KernelFamily("implicit_gemm_fprop", "conv/implicit_gemm_fprop.cu",
                     "implicit_gemm_fprop<{T}, {Acc}, {R}, {I}, {t0}, {t1}, {t2}, {t3}>", True, True,
                     bfloat16=True, tiles=_gemm_tiles_of("implicit_gemm_fprop"), params=_CONV),
        KernelFamily("implicit_gemm_fma_dmma", "conv/implicit_gemm_fma_dmma.cu",
                     "implicit_gemm_fma_dmma<{T}, {Acc}, {R}, {I}, {t0}, {t1}, {t2}, {stages}, "
                     "{tile_m}, {tile_n}, {math}, {cl}>", True, True,
                     tiles=_gemm_tiles_of("implicit_gemm_fma_dmma"),
                     template_fields=_fma_dmma_fields, index64=tile_index64, params=_CONV),
        KernelFamily("implicit_gemm_multistage", "conv/implicit_gemm_multistage.cu",
                     "implicit_gemm_multistage<{T}, {Acc}, {R}, {I}, {t0}, {t1}, {t2}, {stages}>",
                     True, True, bfloat16=True, tiles=_gemm_tiles_of("implicit_gemm_multistage"),
                     template_fields=_multistage_fields, params=_CONV),
        KernelFamily("implicit_gemm_wgmma", "conv/implicit_gemm_wgmma.cu",
                     "implicit_gemm_wgmma<{T}, {Acc}, {R}, {I}, {t0}, {t1}, {t2}, {stages}>",
                     True, True, arch_specific=("sm_90a",), bfloat16=True,
                     tiles=lambda dtype, rank: wgmma_tiles(dtype),
                     template_fields=_wgmma_fields, params=_CONV),
        KernelFamily("direct_conv", "conv/direct_conv.cu",
                     "direct_conv<{T}, {Acc}, {R}, {I}, {t0}, {t1}>", True, True,
                     bfloat16=True, tiles=_direct_tiles, params=_CONV),
        KernelFamily("winograd_input", "conv/winograd_transform.cu",
                     "winograd_input<{T}, {Acc}, {R}, {I}, {t0}>", False, True,
                     tiles=_winograd_tiles, params=(CONV_PARAMS, WINOGRAD_PIECE)),
        KernelFamily("winograd_output", "conv/winograd_transform.cu",
                     "winograd_output<{T}, {Acc}, {R}, {I}, {t0}>", False, True,
                     tiles=_winograd_tiles, params=(CONV_PARAMS, WINOGRAD_PIECE)),
        KernelFamily("data_scan", "conv/data_scan.cu", "data_scan<{T}, {R}, {I}>", False, False,
                     bfloat16=True, params=(SCAN_PARAMS,)),
        KernelFamily("relayout_channels_last", "conv/relayout.cu",
                     "relayout_channels_last<{T}, {T}, {R}, {I}>", False, False,
                     dtypes=RELAYOUT_DTYPES, bfloat16=True, params=(RELAYOUT_PARAMS,)),
        KernelFamily("winograd_weights", "conv/winograd_weights.cu",
                     "winograd_weights<{T}, {Acc}, {R}, {I}>", False, False,
                     tiles=_untiled_as_winograd, params=(WINOGRAD_WEIGHTS,)),
        KernelFamily("splitk_reduce", "conv/splitk_reduce.cu",
                     "splitk_reduce<{T}, {Acc}, {R}, {I}>", False, False,
                     dtypes=SPLITK_DTYPES, params=(SPLITK_REDUCE_PARAMS,)),
    )
}

#: The families with bfloat16 instances: the direct kernel, the implicit GEMM (mma.sync,
#: multistage and wgmma, with the re-layout kernel that lays their operands out) and
#: vol2col (the algorithms that compute bfloat16 natively: ``gemm``'s columns are a copy,
#: its cuBLAS GEMM sums in float32) and the data scan (it reads the operands as they
#: come); the others run a bfloat16 problem in float32.
BFLOAT16_FAMILIES = frozenset(f for f, fam in FAMILIES.items() if fam.bfloat16)


def tiles_for(family: str, dtype, rank: int) -> Tuple[Tuple[int, ...], ...]:
    """Every tile compiled for one (family, dtype, rank); ``((),)`` if untiled, ``()``
    when the family has no instance for the dtype."""
    fam = FAMILIES[family]
    dt = np.dtype(dtype)
    if is_bfloat16(dt) and not fam.bfloat16:
        return ()
    if fam.dtypes is not None and dt not in fam.dtypes:
        return ()
    return fam.tiles(dt, int(rank)) if fam.tiles is not None else ((),)


def name_expression(family: str, dtype, rank: int, index64: bool,
                    tile: Tuple[int, ...] = ()) -> str:
    """NVRTC name expression of one instantiation.

    Examples
    --------
    >>> name_expression("implicit_gemm_fprop", "float32", 3, False, (64, 64, 8, 0))
    'implicit_gemm_fprop<float, float, 3, int, 64, 64, 8, 0>'
    """
    return _name_expression(family, dtype_spec(dtype).dtype, int(rank), bool(index64),
                            tuple(int(v) for v in tile))


@cached(maxsize=4096)
def _name_expression(family, dtype, rank, index64, tile):
    fam = FAMILIES[family]
    spec = dtype_spec(dtype)
    if not 1 <= int(rank) <= MAX_RANK:
        raise ValueError(f"rank must be in [1, {MAX_RANK}]; got {rank}")
    fields = {"T": spec.cpp, "Acc": spec.accum, "R": int(rank), "I": _INDEX_CPP[bool(index64)]}
    fields.update({f"t{i}": int(v) for i, v in enumerate(tile)})
    if fam.template_fields is not None:
        fields.update(fam.template_fields(tile))
    return fam.template.format(**fields)


def instantiations(families: Optional[Iterable[str]] = None,
                   ranks: Iterable[int] = range(1, MAX_RANK + 1),
                   dtypes: Optional[Iterable] = None,
                   index64: Iterable[bool] = (False, True)) -> List[Instantiation]:
    """Every declared instantiation, filtered by family, rank, dtype and index type."""
    fams = list(FAMILIES) if families is None else list(families)
    for f in fams:
        if f not in FAMILIES:
            raise ValueError(f"unknown kernel family {f!r}; known: {sorted(FAMILIES)}")
    dts = [dtype_spec(d).dtype for d in (DTYPES if dtypes is None else dtypes)]
    out = []
    for f in fams:
        fam = FAMILIES[f]
        for dt in dts:
            for r in ranks:
                if int(r) not in fam.ranks:
                    continue
                for wide in index64:
                    for tile in tiles_for(f, dt, r):
                        if wide and not fam.index64(tile):
                            continue
                        out.append(Instantiation(f, dt, int(r), bool(wide), tuple(tile),
                                                 name_expression(f, dt, r, wide, tile)))
    return out


@cached(maxsize=512)
def group_instantiations(source: str, dtype, rank: int) -> Tuple[Instantiation, ...]:
    """All instantiations of one compilation group (see :attr:`Instantiation.group`);
    memoised (the launchers resolve a group on every call)."""
    fams = [f for f, fam in FAMILIES.items() if fam.source == source]
    return tuple(instantiations(fams, ranks=(rank,), dtypes=(dtype,)))


@cached(maxsize=None)
def _by_name() -> Dict[str, Instantiation]:
    return {inst.name: inst for inst in instantiations()}


def lookup(name: str) -> Optional[Instantiation]:
    """The declared instantiation with this name expression, or ``None``."""
    return _by_name().get(name)


@cached(maxsize=4096)
def group_members(name: str) -> Optional[Tuple[str, Tuple[str, ...]]]:
    """``(source, sorted name expressions of its group)`` of a declared instantiation
    (what a loader compiles and caches together), or ``None`` for an undeclared name;
    memoised (the loaders ask on every launch)."""
    inst = lookup(name)
    if inst is None:
        return None
    return inst.source, tuple(sorted(i.name for i in group_instantiations(*inst.group)))
