"""The one vocabulary table: operations, algorithms, boundary modes, layouts, rank.

Every layer reads its names from here, and every error message that lists
valid choices builds the list from here, so a new algorithm is declared once
and is then known to ``method=`` checking, the dispatcher and the backends.

Operations follow CUTLASS's ``conv::Operator`` (``kFprop``, ``kDgrad``,
``kWgrad``): the forward pass, the gradient with respect to the input
(activation) and the gradient with respect to the weights (filter).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import FrozenSet, Tuple

__all__ = [
    "OPS", "FORWARD", "GRAD_INPUT", "GRAD_WEIGHT", "BACKENDS", "Algorithm", "ALGORITHMS",
    "METHODS", "PRECISIONS", "NDIMAGE_INTEGERS", "MAX_RANK", "PADDING_MODES", "PADDING_MODE_ALIASES", "NDIMAGE_MODES", "NDIMAGE_NAMES",
    "LAYOUTS", "SIGNAL_MODES", "SIGNAL_BOUNDARIES", "methods_for", "describe_choices",
]

#: Forward pass: y = conv(x, w).
FORWARD = "forward"
#: Input gradient: dx = A^H dy (also ``conv_transpose``).
GRAD_INPUT = "grad_input"
#: Weight gradient: dw = dy . cols^H.
GRAD_WEIGHT = "grad_weight"
#: Every operation a problem can carry.
OPS = (FORWARD, GRAD_INPUT, GRAD_WEIGHT)

#: Backend names: NumPy (CPU), CuPy (GPU) and the CUDA path on the CPU emulator.
BACKENDS = ("numpy", "cuda", "emulated")

#: Largest spatial rank (the kernels are compiled up to this rank, too).
MAX_RANK = 8
#: ``numpy.pad`` names of the boundary modes, in the order of the kernels' ``cc::PadMode``.
PADDING_MODES = ("constant", "reflect", "symmetric", "wrap", "edge")
#: PyTorch's ``padding_mode`` names accepted by ``conv`` -> the engine's mode
#: (PyTorch's ``"reflect"`` is already ours).
PADDING_MODE_ALIASES = {"zeros": "constant", "replicate": "edge", "circular": "wrap"}
#: ``scipy.ndimage`` filter boundary modes -> the engine's mode (docs/semantics.md has the
#: table with NumPy's and PyTorch's names).  For filters (no interpolation) the ``grid-*``
#: modes extend the input exactly as their plain counterparts: ndimage's ``reflect`` and
#: ``grid-mirror`` are ``symmetric``, its ``mirror`` is our ``reflect``.
NDIMAGE_MODES = {
    "reflect": "symmetric", "grid-mirror": "symmetric", "mirror": "reflect",
    "nearest": "edge", "wrap": "wrap", "grid-wrap": "wrap",
    "constant": "constant", "grid-constant": "constant",
}
#: The ``scipy.ndimage`` name of each engine mode (the first of NDIMAGE_MODES that maps to
#: it: the plain names, never ``grid-*``), for passes handed to ``scipy.ndimage`` itself.
NDIMAGE_NAMES = {}
for _name, _engine in NDIMAGE_MODES.items():
    NDIMAGE_NAMES.setdefault(_engine, _name)
del _name, _engine
#: Memory layouts of ``conv``'s arrays.
LAYOUTS = ("channels_first", "channels_last")
#: ``scipy.signal`` modes of ``convolve``/``correlate``.
SIGNAL_MODES = ("full", "same", "valid")
#: ``scipy.signal.convolve2d``'s ``boundary`` names -> the engine's mode (``fill`` pads
#: with ``fillvalue``).
SIGNAL_BOUNDARIES = {"fill": "constant", "pad": "constant", "wrap": "wrap",
                     "circular": "wrap", "symm": "symmetric", "symmetric": "symmetric"}

_ALL = frozenset(BACKENDS)
_CUDA_PATH = frozenset(("cuda", "emulated"))


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """One algorithm: where it exists and which operations it serves."""

    #: ``method=`` name.
    name: str
    #: Backends that implement it.
    backends: FrozenSet[str]
    #: Operations it serves.
    ops: FrozenSet[str]
    #: One line for docs and error messages.
    summary: str
    #: Operations served on fewer backends than :attr:`backends`: ``((op, backends), ...)``.
    limited: Tuple[Tuple[str, FrozenSet[str]], ...] = ()
    #: What ``auto`` needs of the operands' values to run it (its data rule, checked per
    #: call by the dispatcher), as a clause; "" when any values do.
    needs: str = ""
    #: Whether ``auto``'s data rule scans the operands for exactness first (finite data,
    #: integer results exact in float64: the FFT's rule, ``dispatcher.fft_safe``).
    scans_exactness: bool = False
    #: Why a non-finite ``cval`` rules it out ("" when it does not).
    cval_refusal: str = ""
    #: Where an explicit run spreads one NaN or Inf of the data (SciPy's warning then
    #: says so); "" when it does not.
    spreads: str = ""

    #: ``(op, backend)`` pairs it computes (derived: a set read instead of a call).
    served: FrozenSet[Tuple[str, str]] = dataclasses.field(init=False, repr=False,
                                                          compare=False)

    def __post_init__(self):
        limited = dict(self.limited)
        object.__setattr__(self, "served", frozenset(
            (op, backend) for op in self.ops for backend in limited.get(op, self.backends)))

    def serves(self, op: str, backend: str = None) -> bool:
        """Whether the algorithm computes ``op`` (on ``backend``, if given)."""
        if backend is None:
            return op in self.ops
        return (op, backend) in self.served

    def refusal(self, op: str, backend: str) -> str:
        """Why the algorithm does not compute ``op`` on ``backend`` ("" when it does)."""
        if op not in self.ops:
            return f"{self.name} serves {sorted(self.ops)}, not {op}"
        if not self.serves(op, backend):
            return (f"{self.name} serves {op} on "
                    f"{sorted(dict(self.limited).get(op, self.backends))} only, not {backend}")
        return ""


#: name -> Algorithm.  A backend may still decline one problem with a reason
#: (``can_implement``); this table says what exists at all.
ALGORITHMS = {a.name: a for a in (
    Algorithm("direct", _ALL, frozenset((FORWARD,)),
              "tap loop / stencil kernel, no workspace"),
    Algorithm("implicit_gemm", _ALL, frozenset(OPS),
              "tiled implicit GEMM kernel (tensor cores on sm_80+), no workspace; the gradients "
              "as its forward problems (CUDA path); NumPy: the direct tap loop, forward only",
              limited=((GRAD_INPUT, _CUDA_PATH), (GRAD_WEIGHT, _CUDA_PATH))),
    Algorithm("gemm", _ALL, frozenset(OPS),
              "vol2col column buffer + BLAS/cuBLAS GEMM, chunked to the workspace limit"),
    Algorithm("fft", _ALL, frozenset(OPS),
              "convolution theorem (pocketfft / cuFFT), zero constant padding on the GPU",
              needs="the data are finite and integer results exact in float64",
              scans_exactness=True, spreads="output",
              cval_refusal="a non-finite cval would spread to every output through the FFT"),
    Algorithm("separable", _ALL, frozenset((FORWARD,)),
              "one 1-D pass per axis for a kernel that is an outer product of 1-D factors "
              "(single channel or depthwise; NumPy passes / the direct kernel per axis)",
              needs="the kernel is an outer product or a short sum of them"),
    Algorithm("winograd", _ALL, frozenset((FORWARD, GRAD_INPUT)),
              "Winograd minimal filtering F(m, r) per axis (exact Toom-Cook transforms, "
              "polyphase for stride/dilation), tiles within an error gate; input gradient "
              "of stride-1, constant-padded problems; NumPy or transform kernels + cuBLAS",
              needs="the data are finite", spreads="output over whole Winograd tiles"),
)}

#: ``precision=`` values: ``highest`` (float32 in float32 FMA, float64 in float64, the
#: default) and ``tf32`` (float32 operands rounded to TF32, products and sums in float32).
PRECISIONS = ("highest", "tf32")

#: ``cupyconv.config.ndimage_integers``: how 64-bit integer sums past 2**53 compute.
NDIMAGE_INTEGERS = ("scipy", "exact")

#: Every ``method=`` value.
METHODS = ("auto",) + tuple(ALGORITHMS)


@functools.lru_cache(maxsize=None)
def methods_for(op: str = FORWARD, backend: str = None) -> Tuple[str, ...]:
    """``method=`` values valid for an operation (and a backend, if given)."""
    return ("auto",) + tuple(
        name for name, a in ALGORITHMS.items()
        if a.serves(op, backend))


def describe_choices(values) -> str:
    """``'a', 'b' or 'c'`` for error messages."""
    quoted = [repr(v) for v in values]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
