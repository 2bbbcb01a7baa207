"""The planning core: one frozen description of a convolution problem and its operation.

Every backend and every algorithm consumes a :class:`ConvProblem`; none of
them re-derives geometry.  A problem carries an ``op`` (see
:mod:`cupyconv._vocabulary`): the forward pass, the input gradient or the
weight gradient of the same geometry; the gradients are problems of this
type, not separate code paths.  The description is channels-first and logical:
``x`` is ``(N, C, *S)``, ``w`` is ``(K, C/G, *KS)`` and ``y`` is
``(N, K, *O)``.  ``layout`` only records how the user's arrays are laid out
(``channels_last`` puts the channel axis last), which changes strides, never
the arithmetic.

The three arrays keep their convolution names whatever the operation:
*activation* ``x``, *filter* ``w`` and *output* ``y`` (or its gradient
``dy``).  Each operation maps them onto the implicit GEMM's ``A``, ``B`` and
``C`` as CUTLASS 3.x ``convolution.h`` does (:data:`ROLES`; never mix the
two vocabularies)::

    op           A (M x K)     B (K x N)     C (M x N)       M            N             K
    forward      activation    filter        output          N*prod(O)    K/G           (C/G)*prod(KS)
    grad_input   output (dy)   filter        activation (dx) N*prod(S)    C/G           (K/G)*prod(KS)
    grad_weight  output (dy)   activation    filter (dw)     K/G          (C/G)*prod(KS) N*prod(O)

(per group; CUTLASS's ``implicit_gemm_problem_size``).  Operands travel by
role name (:class:`Operands`), never by position.

Output extent per spatial axis ``i``::

    O_i = floor((S_i + pb_i + pa_i - dilation_i * (KS_i - 1) - 1) / stride_i) + 1
"""
from __future__ import annotations

import dataclasses
import math
import operator
from typing import TYPE_CHECKING, Tuple

import numpy as np

from .._vocabulary import FORWARD, GRAD_INPUT, GRAD_WEIGHT, OPS
from . import args
from .roles import ROLES, Operands, Roles

__all__ = ["ConvProblem", "Operands", "Roles", "ROLES", "layout_shape", "INT32_MAX"]

#: Largest offset the 32-bit index kernels can address.
INT32_MAX = 2**31 - 1

Pair = Tuple[int, int]


def layout_shape(layout, lead, chan, spatial):
    """Full array shape ``(lead, chan, *spatial)`` in ``layout`` order."""
    if layout == "channels_first":
        return (lead, chan) + tuple(spatial)
    return (lead,) + tuple(spatial) + (chan,)


class _Hashed:
    """Holds a problem's hash as the bound ``__index__`` of the int (:class:`ConvProblem`'s
    ``__hash__`` is this slot's descriptor: hashing reads the slot and calls that C method,
    no Python frame, where the dispatcher's and the launchers' caches hash a problem a
    dozen times on a call's first pass)."""

    __slots__ = ("_hash_call",)


@dataclasses.dataclass(frozen=True)
class ConvProblem(_Hashed):
    """Frozen, validated description of one batched N-D convolution.

    Build it with :meth:`create`; the constructor does no validation.

    Attributes
    ----------
    ndim : int
        Spatial rank ``R``.
    batch, in_channels, out_channels, groups : int
        ``N``, ``C``, ``K`` and ``G``.
    in_shape, kernel_shape, out_shape : tuple of int
        Spatial extents ``S``, ``KS`` and ``O``.
    stride, dilation : tuple of int
        Per spatial axis, all >= 1.
    padding : tuple of (int, int)
        ``(before, after)`` per spatial axis, all >= 0.
    padding_mode : str
        One of :data:`PADDING_MODES` (``numpy.pad`` semantics).
    cval : scalar
        Fill value of ``padding_mode="constant"``.
    layout : str
        ``"channels_first"`` or ``"channels_last"``.
    dtype : numpy.dtype
        Dtype of the result.
    flip : bool
        ``True`` for true convolution (kernel taps reversed), ``False`` for
        cross-correlation (deep-learning convention).  Weights are never
        conjugated here: callers conjugate for complex correlation.
    op : str
        ``"forward"``, ``"grad_input"`` or ``"grad_weight"`` (:data:`ROLES`).
    precision : str
        ``"highest"`` or ``"tf32"`` (float32 only: the operands are rounded to TF32
        before any algorithm runs; :func:`cupyconv.core.args.normalize_precision`).
    conjugate : bool
        Gradients only: use the adjoint (conjugate transpose) for complex
        data, PyTorch's convention; ``False`` gives the plain transpose that
        ``conv_transpose`` needs.

    Derived once when the problem is made (plain attributes):

    taps : int
        Number of kernel taps, ``prod(KS)``.
    gemm_m, gemm_n, gemm_k : int
        The forward GEMM (the kernels' geometry): output positions ``N * prod(O)``,
        output channels per group ``K / G``, reduction length ``(C / G) * prod(KS)``
        (vol2col rows).
    gemm_mnk : tuple of int
        ``(M, N, K)`` of ``op``'s implicit GEMM per group (module docstring table).
    output_size : int
        Number of forward output elements.
    is_complex : bool
    flops : int
        Counted floating-point operations of ``op`` (a multiply-add is 2, complex 8).
    bytes_moved : int
        Compulsory traffic: read the two operands once, write the result once.
    is_empty : bool
        The forward output or its reduction is empty: every op is then a zero (or
        empty) result and no kernel runs.
    needs_int64 : bool
        Some extent or element offset passes ``2**31 - 1``.
    logical_result_shape : tuple of int
        Channels-first shape of the array ``op`` computes.
    x_shape, w_shape, y_shape : tuple of int
        Full input, weight and output shapes in ``layout`` order.
    result_shape : tuple of int
        Full shape (``layout`` order) of the array ``op`` computes (:data:`ROLES` c).
    """

    ndim: int
    batch: int
    in_channels: int
    out_channels: int
    groups: int
    in_shape: Tuple[int, ...]
    kernel_shape: Tuple[int, ...]
    out_shape: Tuple[int, ...]
    stride: Tuple[int, ...]
    dilation: Tuple[int, ...]
    padding: Tuple[Pair, ...]
    padding_mode: str = "constant"
    cval: complex = 0
    layout: str = "channels_first"
    dtype: np.dtype = np.dtype(np.float64)
    flip: bool = False
    op: str = FORWARD
    conjugate: bool = True
    precision: str = "highest"

    if TYPE_CHECKING:       # derived once in __post_init__ (class docstring), not fields
        taps: int
        gemm_m: int
        gemm_n: int
        gemm_k: int
        gemm_mnk: Tuple[int, int, int]
        output_size: int
        is_complex: bool
        flops: int
        bytes_moved: int
        is_empty: bool
        needs_int64: bool
        logical_result_shape: Tuple[int, ...]
        x_shape: Tuple[int, ...]
        w_shape: Tuple[int, ...]
        y_shape: Tuple[int, ...]
        result_shape: Tuple[int, ...]

    # ------------------------------------------------------------------ build
    @classmethod
    def create(cls, *, x_shape, w_shape, stride=1, padding=0, dilation=1,
               groups=1, padding_mode="constant", cval=0,
               layout="channels_first", dtype=np.float64, flip=False, op=FORWARD,
               conjugate=True, precision="highest"):
        """Validate a geometry and derive the output shape.

        Parameters
        ----------
        x_shape, w_shape : tuple of int
            Full array shapes in ``layout`` order.
        stride, dilation : int or sequence of int
        padding : int, sequence of int, sequence of (int, int), "valid" or "same"
        groups : int
        padding_mode, cval, layout, dtype, flip, op, conjugate
            See the class attributes.

        Raises
        ------
        ValueError
            Naming the argument and the axis for every inconsistency.
        """
        if op not in OPS:
            raise ValueError(f"op must be one of {OPS}; got {op!r}")
        return cls(flip=bool(flip), op=op, conjugate=bool(conjugate), **args.conv_geometry(
            x_shape, w_shape, stride, padding, dilation, groups, padding_mode, cval, layout,
            dtype, precision))

    def __post_init__(self):
        # the derived quantities, computed once per problem: the chooser, the cost models
        # and the launchers read them many times on a call's first pass
        set_ = object.__setattr__
        cg, kg = self.in_channels // self.groups, self.out_channels // self.groups
        taps = math.prod(map(int, self.kernel_shape))
        positions = math.prod(map(int, self.out_shape))
        inputs = math.prod(map(int, self.in_shape))
        gemm_m = self.batch * positions
        gemm_k = cg * taps
        output_size = self.batch * self.out_channels * positions
        if self.op == GRAD_INPUT:
            mnk = (self.batch * inputs, cg, kg * taps)
        elif self.op == GRAD_WEIGHT:
            mnk = (kg, cg * taps, gemm_m)
        else:
            mnk = (gemm_m, kg, cg * taps)
        is_complex = self.dtype.kind == "c"
        x_size = self.batch * self.in_channels * inputs
        w_size = self.out_channels * cg * taps
        padded_shape = []
        for s, (pb, pa) in zip(self.in_shape, self.padding):
            padded_shape.append(s + pb + pa)
        padded_shape = tuple(padded_shape)
        padded = math.prod(padded_shape)
        logical = ((self.batch, self.in_channels) + self.in_shape,
                   (self.out_channels, cg) + self.kernel_shape,
                   (self.batch, self.out_channels) + self.out_shape)
        if self.layout == "channels_first":
            shapes = logical
        else:
            shapes = tuple([layout_shape(self.layout, a[0], a[1], a[2:]) for a in logical])
        for name, value in (
                ("taps", taps), ("gemm_m", gemm_m), ("gemm_n", kg), ("gemm_k", gemm_k),
                ("gemm_mnk", mnk), ("output_size", output_size), ("is_complex", is_complex),
                ("flops", (8 if is_complex else 2) * self.groups * mnk[0] * mnk[1] * mnk[2]),
                ("bytes_moved", self.dtype.itemsize * (x_size + w_size + output_size)),
                ("is_empty", output_size == 0 or gemm_k == 0),
                ("needs_int64", max(self.batch * self.in_channels * padded, x_size, w_size,
                                    output_size, self.groups * gemm_k * gemm_m) > INT32_MAX),
                ("logical_result_shape", logical[_RESULT[ROLES[self.op].c]]),
                ("x_shape", shapes[0]), ("w_shape", shapes[1]), ("y_shape", shapes[2]),
                ("result_shape", shapes[_RESULT[ROLES[self.op].c]]), ("_positions", positions),
                ("_padded", padded_shape),
                ("_hash_call", hash(_field_values(self)).__index__)):
            set_(self, name, value)

    def __reduce__(self):
        # rebuilt from its fields (a pickle or a copy), so the derived values and the hash
        # are computed again where it is loaded (a string's hash differs between processes)
        return type(self), _field_values(self)

    # ----------------------------------------------------------------- shapes
    def column_bytes(self, batch_chunk=None):
        """Bytes of the vol2col buffer for ``batch_chunk`` images (all groups)."""
        nb = self.batch if batch_chunk is None else batch_chunk
        return self.dtype.itemsize * self.groups * self.gemm_k * nb * self._positions

    def padded_shape(self):
        """Per-axis extent of the padded input, ``S + pb + pa``."""
        return self._padded

    def with_(self, **changes):
        """A copy with some fields replaced (no re-validation); ``self`` when nothing
        changes (the dispatcher's caches then reuse its hash)."""
        for k, v in changes.items():
            if getattr(self, k) != v:
                return dataclasses.replace(self, **changes)
        return self

    def __repr__(self):
        geo = ", ".join(
            f"{name}={getattr(self, name)}" for name in
            ("stride", "dilation", "padding") if any(
                v != (1 if name != "padding" else (0, 0)) for v in getattr(self, name)))
        return (f"ConvProblem({self.ndim}-D, N={self.batch}, C={self.in_channels}, "
                f"K={self.out_channels}, G={self.groups}, S={self.in_shape}, "
                f"KS={self.kernel_shape}, O={self.out_shape}"
                + (f", {geo}" if geo else "")
                + (f", mode={self.padding_mode}" if self.padding_mode != "constant" else "")
                + f", {self.dtype}, {'conv' if self.flip else 'xcorr'}"
                + (f", op={self.op}" if self.op != FORWARD else "") + ")")


_FIELDS = tuple([f.name for f in dataclasses.fields(ConvProblem)])
#: ``problem -> (its field values)`` in one C call (the hash's key).
_field_values = operator.attrgetter(*_FIELDS)
ConvProblem.__hash__ = _Hashed._hash_call          # type: ignore[assignment]  # see _Hashed
#: Index of each role's array in ``(x, w, y)``.
_RESULT = {"activation": 0, "filter": 1, "output": 2}

