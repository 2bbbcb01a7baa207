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

from .._dtypes import LazyTable, bfloat16, is_bfloat16
from .._paths import cuda_src_dir
from .._lru import cached
from .._vocabulary import MAX_RANK
from .families import (CONV_PARAMS, RELAYOUT_PARAMS, SCAN_PARAMS, SPLITK_REDUCE_PARAMS,
                       WINOGRAD_PIECE, WINOGRAD_WEIGHTS, KernelFamily)
from .tile_variants import (FMA_DMMA_CHANNELS_LAST, FMA_DMMA_VARIANTS, MULTISTAGE,
                            TILE_VARIANTS, WGMMA, WGMMA_STAGES, TileVariant, channels_last_twin,
                            gemm_family, gemm_tile_fits, gemm_tiles, multistage_smem_bytes,
                            multistage_stages, tensor_core_tile, tensor_core_variant,
                            tile_index64, tile_stages, tile_variant, wgmma_tiles,
                            asks_layout, checked_tile, is_multistage)

__all__ = [
    "DtypeSpec", "KernelFamily", "Instantiation", "DTYPES", "FAMILIES",
    "MAX_RANK", "THREADS", "DIRECT_TAP_BLOCK", "LAUNCH_CONFIG_HEADER", "read_block_threads",
    "read_define", "dtype_spec",
    "name_expression", "gemm_tiles", "gemm_tile_fits", "FMA_DMMA_VARIANTS", "FMA_DMMA_CHANNELS_LAST",
    "TileVariant", "TILE_VARIANTS", "tile_variant", "tile_stages", "tensor_core_tile",
    "checked_tile", "asks_layout", "is_multistage",
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


@cached(64, typed=True)
def dtype_spec(dtype) -> DtypeSpec:
    """Return the :class:`DtypeSpec` of ``dtype`` (memoised).

    Raises
    ------
    TypeError
        If the kernels have no instantiation for ``dtype``.
    """
    if isinstance(dtype, str) and dtype in DTYPES:   # "bfloat16" before ml_dtypes is loaded
        return DTYPES[dtype]
    dt = np.dtype(dtype)
    try:
        return DTYPES[dt.name]
    except KeyError:
        raise TypeError(
            f"the CUDA kernels support dtypes {sorted(DTYPES)}; got {dt.name}") from None


def gemm_dynamic_smem(tile: Tuple[int, ...], dtype) -> int:
    """Dynamic shared bytes a ``tile`` is launched with (0: static shared memory only):
    :func:`multistage_smem_bytes` for variant :data:`MULTISTAGE`, ``stages * (BM + BN) *
    BK`` elements for the FMA/DMMA multistage tiles (the kernels check it)."""
    family = tile_variant(tile).family
    if family == "implicit_gemm_multistage":
        return multistage_smem_bytes(tile)
    if family == "implicit_gemm_wgmma":   # the stages, and 1 KiB to align them to the swizzle
        return WGMMA_STAGES * (tile[0] + tile[1]) * 128 + 1024
    if family != "implicit_gemm_fma_dmma":
        return 0
    bm, bn, bk = tile[:3]
    return tile_stages(tile) * (bm + bn) * bk * dtype_spec(dtype).dtype.itemsize


def block_threads(family: str, tile: Tuple[int, ...] = ()) -> int:
    """Threads per block of a family's kernels (of ``tile``'s, where the family's tiles
    differ: an MMA tile of :data:`FMA_DMMA_VARIANTS` has one warp per warp tile)."""
    if family == "implicit_gemm_fma_dmma" and tile and tile_variant(tile).tensor_cores:
        tile_m, tile_n = tile_variant(tile).warp_tile
        return 32 * (tile[0] // tile_m) * (tile[1] // tile_n)
    if family == "implicit_gemm_wgmma":
        return WGMMA_THREADS
    return MULTISTAGE_THREADS if family == "implicit_gemm_multistage" else THREADS


@cached(maxsize=16, keep=True)
def direct_tiles(rank: int) -> Tuple[Tuple[int, int], ...]:
    """Output tiles (TILE_H, TILE_W) of the direct kernel for a rank, preferred first.

    The smaller tiles exist for large strides/dilations, whose input tile
    (``(TILE_H-1)*stride + span`` rows by ``(TILE_W-1)*stride + span`` columns)
    would not fit shared memory with the default one.  Memoised (a constant per rank,
    asked by every direct launch).
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
    variant = tile_variant(tile)
    tile_m, tile_n = variant.warp_tile
    return dict(stages=variant.stages, tile_m=tile_m, tile_n=tile_n, math=variant.atom,
                cl="true" if variant.channels_last else "false")


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
                            tuple(map(int, tile)))


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
