"""Kernel-family records and the parameter structs they take, each declared once.

A :class:`KernelFamily` says everything the builder and the launchers need of one
templated ``__global__`` function: its source file, how to spell an instance (template
arguments), the dtypes, ranks and tiles it is compiled for, and the by-value parameter
structs it takes (:class:`ParamSpec`).  :mod:`.registry` holds the table of records.

A :class:`ParamSpec` lists a C struct's fields in order; :meth:`ParamSpec.dtype` is the
NumPy structured dtype whose bytes equal the struct (every field is 8 bytes wide, so
``align=True`` reproduces the device layout without padding).  The launchers pack a
scalar of that dtype and CuPy (or the emulator) passes it by value;
``tests/kernels/test_param_structs.py`` compares every spec with the compiled struct's
``offsetof``/``sizeof``.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable, Dict, FrozenSet, Optional, Tuple, Union

import numpy as np

from .._lru import cached
from .._vocabulary import MAX_RANK

__all__ = ["Field", "ParamSpec", "KernelFamily", "fields", "FAST_DIVMOD_PARAMS",
           "CONV_PARAMS", "SPLITK_REDUCE_PARAMS", "SCAN_PARAMS", "RELAYOUT_PARAMS",
           "WINOGRAD_PIECE", "WINOGRAD_WEIGHTS", "PARAM_SPECS"]

#: C scalar type -> NumPy dtype (the struct fields are 8 bytes wide).
SCALARS = {"long long": np.dtype(np.int64), "double": np.dtype(np.float64)}
_RANK_DIM = re.compile(r"R(?:\s*\+\s*(\d+))?")


@dataclasses.dataclass(frozen=True)
class Field:
    """One field of a parameter struct."""

    #: C member name (also the dtype's field name).
    name: str
    #: ``"long long"``, ``"double"`` or a nested struct's :class:`ParamSpec`.
    ctype: Union[str, "ParamSpec"]
    #: Array extents, outermost first: ints, ``"R"`` or ``"R + k"`` (the spatial rank).
    shape: Tuple[Union[int, str], ...] = ()

    def extents(self, rank: Optional[int]) -> Tuple[int, ...]:
        """The array extents for spatial rank ``rank``."""
        out = []
        for dim in self.shape:
            if isinstance(dim, str):
                m = _RANK_DIM.fullmatch(dim.strip())
                if m is None or rank is None:
                    raise ValueError(f"field {self.name}: extent {dim!r} needs a rank")
                dim = int(rank) + int(m.group(1) or 0)
            out.append(int(dim))
        return tuple(out)


def fields(ctype, names: str, *shape) -> Tuple[Field, ...]:
    """Fields of one type and shape, one per space-separated name."""
    return tuple(Field(name, ctype, tuple(shape)) for name in names.split())


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """A kernel parameter struct: its C name, the header declaring it and its fields."""

    #: Qualified C++ name (``cc::ConvParams``); a template over the rank when ``ranked``.
    c_name: str
    #: The source declaring it, relative to ``cuda_src/``.
    header: str
    fields: Tuple[Field, ...]
    #: True for ``template <int R>`` structs.
    ranked: bool = False

    def dtype(self, rank: Optional[int] = None) -> np.dtype:
        """The structured dtype of the struct (of ``rank``'s instance when ranked);
        memoised, so a spec's dtype is one object per rank."""
        return _dtype(self, int(rank) if self.ranked else None)

    def pack(self, rank: Optional[int] = None, **values) -> np.void:
        """A scalar of :meth:`dtype` with the named fields set and the others zero.

        Raises
        ------
        KeyError
            Naming a field the struct does not have.
        """
        dt = self.dtype(rank)
        p = np.zeros((), dt)
        for name, value in values.items():
            if name not in dt.fields:
                raise KeyError(f"{self.c_name} has no field {name!r}; fields: {dt.names}")
            p[name] = value
        return p[()]

    def c_type(self, rank: Optional[int] = None) -> str:
        """The C++ type (``cc::ConvParams<3>``)."""
        return f"{self.c_name}<{int(rank)}>" if self.ranked else self.c_name


@cached(maxsize=None)
def _dtype(spec: ParamSpec, rank: Optional[int]) -> np.dtype:
    if spec.ranked and not 1 <= rank <= MAX_RANK:
        raise ValueError(f"rank must be in [1, {MAX_RANK}]; got {rank}")
    out = []
    for f in spec.fields:
        base = f.ctype.dtype(rank) if isinstance(f.ctype, ParamSpec) else SCALARS[f.ctype]
        ext = f.extents(rank)
        out.append((f.name, base, ext) if ext else (f.name, base))
    return np.dtype(out, align=True)


_I, _D = "long long", "double"

#: ``cc::FastDivmodParams`` (cuda_src/common/fast_divmod.cuh).
FAST_DIVMOD_PARAMS = ParamSpec("cc::FastDivmodParams", "common/fast_divmod.cuh",
                               fields(_I, "divisor mul32 mul64 shift"))
_FD = FAST_DIVMOD_PARAMS

#: ``cc::ConvParams<R>`` (cuda_src/common/conv_params.cuh): every convolution family's.
CONV_PARAMS = ParamSpec("cc::ConvParams", "common/conv_params.cuh", (
    *fields(_I, "N C K G cpg kpg"),
    *fields(_I, "in_ext k_ext out_ext stride dilation pad_before", "R"),
    *fields(_I, "x_stride_n x_stride_c"), *fields(_I, "x_stride", "R"),
    *fields(_I, "w_stride_k w_stride_c"), *fields(_I, "w_stride", "R"),
    *fields(_I, "y_stride_n y_stride_k"), *fields(_I, "y_stride", "R"),
    *fields(_I, "bias_stride has_bias pad_mode flip n0 n_count g0 in_size taps out_size "
                "gemm_k gemm_m"),
    *fields(_FD, "div_in div_k div_out", "R"),
    *fields(_FD, "div_in_size div_taps div_out_size div_C div_kpg"),
    *fields(_FD, "div_grid", 3), *fields(_I, "aux", 4),
    *fields(_D, "cval_re cval_im alpha_re alpha_im beta_re beta_im"),
), ranked=True)

#: ``cc::SplitkReduceParams`` (cuda_src/conv/splitk_reduce.cu).
SPLITK_REDUCE_PARAMS = ParamSpec("cc::SplitkReduceParams", "conv/splitk_reduce.cu",
                                 fields(_I, "outer parts inner total"))

#: ``cc::ScanParams<R>`` (cuda_src/conv/data_scan.cu): three operands of R + 2 axes.
SCAN_PARAMS = ParamSpec("cc::ScanParams", "conv/data_scan.cu", (
    *fields(_I, "count dims", 3), *fields(_I, "shape stride", 3, "R + 2")), ranked=True)

#: ``cc::RelayoutParams<R>`` (cuda_src/conv/relayout.cu).
RELAYOUT_PARAMS = ParamSpec("cc::RelayoutParams", "conv/relayout.cu", (
    *fields(_I, "lead channels spatial round_tf32 in_stride_lead in_stride_c"),
    *fields(_I, "in_stride", "R"), *fields(_I, "c_tiles s_tiles tiles"),
    *fields(_FD, "div_ext", "R"), *fields(_FD, "div_s_tiles div_c_tiles")), ranked=True)

#: ``cc::WinogradPiece<R>`` (cuda_src/conv/winograd_transform.cu).
WINOGRAD_PIECE = ParamSpec("cc::WinogradPiece", "conv/winograd_transform.cu", (
    *fields(_I, "m alpha tiles count in_start in_step padded out_start out_step", "R"),
    *fields(_I, "tile_count vol out_vol channels cols items tiles_per_block pitch accumulate"),
    *fields(_FD, "div_alpha div_m div_tiles", "R"),
    *fields(_FD, "div_vol div_out_vol div_T div_channels div_tb")), ranked=True)

#: ``cc::WinogradWeights<R>`` (cuda_src/conv/winograd_weights.cu).
WINOGRAD_WEIGHTS = ParamSpec("cc::WinogradWeights", "conv/winograd_weights.cu", (
    *fields(_I, "K cg taps positions stride_k stride_c"),
    *fields(_I, "tap_ext tap_stride", "R")), ranked=True)

#: Every parameter struct of the kernels.
PARAM_SPECS: Tuple[ParamSpec, ...] = (FAST_DIVMOD_PARAMS, CONV_PARAMS, SPLITK_REDUCE_PARAMS,
                                      SCAN_PARAMS, RELAYOUT_PARAMS, WINOGRAD_PIECE,
                                      WINOGRAD_WEIGHTS)


def _every_tile(tile) -> bool:
    return True


@dataclasses.dataclass(frozen=True)
class KernelFamily:
    """One templated ``__global__`` function and how to spell its instances."""

    #: family name (also the C++ function name).
    name: str
    #: source file relative to ``cuda_src/``.
    source: str
    #: ``str.format`` pattern over T, Acc, R, I, the tile entries ``t0``... and the
    #: names :attr:`template_fields` adds.
    template: str
    #: hot kernels must compile without register spills.
    hot: bool
    #: True when the family takes a tile (see :attr:`tiles`).
    tiled: bool
    #: Arch-specific targets (``("sm_90a",)``) the family is built for, and only those:
    #: its kernels use instructions the portable archs lack (Hopper's warpgroup MMA), run
    #: only on the matching compute capability, and a launcher falls back to a portable
    #: family elsewhere.  Empty: a portable family (every ``sm_XY`` and ``compute_XY``).
    arch_specific: Tuple[str, ...] = ()
    #: The element dtypes it is compiled for (``None``: every dtype of the registry but
    #: bfloat16, which :attr:`bfloat16` adds).
    dtypes: Optional[FrozenSet[np.dtype]] = None
    #: Whether it has bfloat16 instances (the families that compute bfloat16 natively).
    bfloat16: bool = False
    #: The spatial ranks it is compiled for.
    ranks: Tuple[int, ...] = tuple(range(1, MAX_RANK + 1))
    #: ``tiles(dtype, rank)``: the tiles compiled for a dtype and rank, preferred first
    #: (``None``: one untiled instance, ``()``).
    tiles: Optional[Callable[[np.dtype, int], Tuple[Tuple[int, ...], ...]]] = None
    #: ``template_fields(tile)``: template arguments derived from the tile, by name.
    template_fields: Optional[Callable[[Tuple[int, ...]], Dict[str, object]]] = None
    #: ``index64(tile)``: whether the tile has a 64-bit-index instance.
    index64: Callable[[Tuple[int, ...]], bool] = _every_tile
    #: The by-value parameter structs of its kernels, in argument order.
    params: Tuple[ParamSpec, ...] = ()

    def builds_for(self, arch: str) -> bool:
        """Whether this family is compiled for ``arch`` (``sm_80``, ``sm_90a``, ``compute_90``)."""
        return arch in self.arch_specific if self.arch_specific else not arch.endswith("a")
