"""Named benchmark problem sets.

Every case is a frozen :class:`Case`; :meth:`Case.problem` builds the
:class:`~cupyconv.ConvProblem` the library plans for it, which supplies the
counted work (``flops``, ``bytes_moved``) behind every FLOP/s, byte/s and
roofline figure.

Suites
------
``scientific``
    Single-channel ``convolve``/``correlate``, ranks 1-6, kernels 3 to 31
    and one very long 1-D kernel, modes ``same``/``valid``/``full``,
    float32/float64/complex64.
``deep_learning``
    Batched multi-channel ``conv`` in 2-D to 5-D, 16 to 256 channels,
    batch 1-32, stride-2 and dilation-2 cases, both layouts.
``gradients``
    ``conv_grad_input`` and ``conv_grad_weight`` on 3-D and 4-D cases.
``cpu_scientific``
    The acceptance benchmark of the NumPy backend: single-channel
    ``convolve``, ranks 2-5, kernels 3-15 (against
    ``scipy.signal.convolve(method="auto")``).
``all``
    ``scientific`` + ``deep_learning`` + ``gradients``.

Each suite has a GPU-scale list (the default) and a CPU-scale ``quick``
list sized so that ``--quick`` runs in one to two minutes on a 2-core CPU.
"""
from __future__ import annotations

import dataclasses
from typing import Tuple

import numpy as np

from ..core.problem import ConvProblem, layout_shape
from ..core.signal_map import signal_call

__all__ = ["Case", "SUITES", "cases", "KINDS"]

#: Case kinds: the SciPy-style functions, the batched layer, its two gradients.
KINDS = ("signal", "conv", "grad_input", "grad_weight")


@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmark problem.

    Attributes
    ----------
    suite : str
        Name of the suite the case belongs to.
    kind : str
        One of :data:`KINDS`.
    shape, kernel : tuple of int
        ``signal``: the shapes of ``in1`` and ``in2``.  Other kinds: the
        spatial extents ``S`` and ``KS``.
    dtype : str
    mode, func : str
        ``signal`` only: ``full``/``same``/``valid`` and
        ``convolve``/``correlate``.
    batch, cin, cout, stride, dilation, padding : int
        Batched kinds only (one value for every spatial axis).
    layout : str
        ``channels_first`` or ``channels_last`` (batched kinds).
    """

    suite: str
    kind: str
    shape: Tuple[int, ...]
    kernel: Tuple[int, ...]
    dtype: str = "float32"
    mode: str = "same"
    func: str = "convolve"
    batch: int = 1
    cin: int = 1
    cout: int = 1
    stride: int = 1
    dilation: int = 1
    padding: int = 0
    layout: str = "channels_first"

    @property
    def ndim(self):
        """Spatial rank."""
        return len(self.shape)

    @property
    def name(self):
        """Short readable label, unique within a suite."""
        dims = "x".join(map(str, self.shape))
        ks = "x".join(map(str, self.kernel))
        if self.kind == "signal":
            return f"{self.func} {self.ndim}-D {dims} * {ks} {self.mode} {self.dtype}"
        geo = "".join(f" {k}{v}" for k, v in (("s", self.stride), ("d", self.dilation))
                      if v != 1)
        lay = " CL" if self.layout == "channels_last" else ""
        label = {"conv": "conv", "grad_input": "grad_input",
                 "grad_weight": "grad_weight"}[self.kind]
        return (f"{label} {self.ndim}-D N{self.batch} {self.cin}->{self.cout} {dims} "
                f"k{ks}{geo}{lay} {self.dtype}")

    @property
    def x_shape(self):
        """Input shape in ``layout`` order (batched kinds)."""
        return layout_shape(self.layout, self.batch, self.cin, self.shape)

    @property
    def w_shape(self):
        """Weight shape in ``layout`` order (batched kinds)."""
        return layout_shape(self.layout, self.cout, self.cin, self.kernel)

    def geometry(self):
        """Keyword arguments shared by ``conv`` and its gradients."""
        return dict(stride=self.stride, padding=self.padding, dilation=self.dilation,
                    layout=self.layout)

    def problem(self):
        """The :class:`~cupyconv.ConvProblem` the library plans for this case.

        For the gradients it is the forward problem: ``conv_grad_input`` and
        ``conv_grad_weight`` perform the same multiply-adds and touch
        arrays of the same sizes, so its ``flops`` and ``bytes_moved`` are
        theirs too.
        """
        if self.kind == "signal":
            dt = np.dtype(self.dtype)
            # the library's own mapping, from the shapes alone
            return signal_call(tuple(self.shape), dt, tuple(self.kernel), dt, self.mode,
                               tuple(range(len(self.shape))), self.func == "correlate").problem
        return ConvProblem.create(x_shape=self.x_shape, w_shape=self.w_shape,
                                  stride=self.stride, padding=self.padding,
                                  dilation=self.dilation, layout=self.layout,
                                  dtype=self.dtype, flip=False)

    def y_shape(self):
        """Output shape in ``layout`` order (batched kinds)."""
        return self.problem().y_shape


def _sig(suite, shape, kernel, mode="same", dtype="float32", func="convolve"):
    return Case(suite, "signal", tuple(shape), tuple(kernel), dtype=dtype, mode=mode,
                func=func)


def _cube(edge, rank):
    return (edge,) * rank


def _scientific(quick):
    s = "scientific"
    if quick:
        return [
            _sig(s, (2**18,), (2**11,)),                          # very long kernel
            _sig(s, (2**16,), (31,), "full", "float64"),
            _sig(s, (256, 256), (3, 3)),
            _sig(s, (192, 192), (31, 31), "valid", "float64"),
            _sig(s, _cube(40, 3), _cube(7, 3), "valid", "float64"),
            _sig(s, _cube(24, 3), _cube(15, 3), "same", "complex64", "correlate"),
            _sig(s, _cube(16, 4), _cube(3, 4)),
            _sig(s, _cube(12, 4), _cube(5, 4), "full", "float64"),
            _sig(s, _cube(9, 5), _cube(3, 5)),
            _sig(s, _cube(6, 6), _cube(3, 6), "valid", "float64"),
            _sig(s, _cube(6, 6), _cube(3, 6), "same", "complex64", "correlate"),
        ]
    return [
        _sig(s, (2**20,), (2**12,)),                              # very long kernel
        _sig(s, (2**22,), (31,), "full", "float64"),
        _sig(s, (4096, 4096), (3, 3)),
        _sig(s, (2048, 2048), (31, 31), "same", "float32"),
        _sig(s, (2048, 2048), (15, 15), "valid", "float64"),
        _sig(s, _cube(256, 3), _cube(3, 3)),
        _sig(s, _cube(192, 3), _cube(7, 3), "full", "float64"),
        _sig(s, _cube(128, 3), _cube(15, 3), "same", "complex64", "correlate"),
        _sig(s, _cube(64, 4), _cube(3, 4)),
        _sig(s, _cube(48, 4), _cube(5, 4), "valid", "float64"),
        _sig(s, _cube(40, 4), _cube(9, 4)),
        _sig(s, _cube(24, 5), _cube(3, 5)),
        _sig(s, _cube(20, 5), _cube(5, 5), "full", "float64", "correlate"),
        _sig(s, _cube(12, 6), _cube(3, 6)),
        _sig(s, _cube(10, 6), _cube(5, 6), "valid", "complex64"),
    ]


def _layer(suite, kind, rank, batch, cin, cout, edge, k=3, stride=1, dilation=1,
           layout="channels_first", dtype="float32"):
    pad = dilation * (k - 1) // 2
    return Case(suite, kind, _cube(edge, rank), _cube(k, rank), dtype=dtype, batch=batch,
                cin=cin, cout=cout, stride=stride, dilation=dilation, padding=pad,
                layout=layout)


def _deep_learning(quick):
    s, c, cl = "deep_learning", "conv", "channels_last"
    if quick:
        return [
            _layer(s, c, 2, 4, 16, 32, 32),
            _layer(s, c, 2, 2, 32, 64, 32, stride=2, layout=cl),
            _layer(s, c, 2, 1, 64, 64, 16, dilation=2),
            _layer(s, c, 3, 2, 16, 16, 16),
            _layer(s, c, 3, 1, 16, 32, 16, stride=2, layout=cl),
            _layer(s, c, 4, 1, 16, 16, 8),
            _layer(s, c, 4, 1, 16, 16, 10, dilation=2, layout=cl),
            _layer(s, c, 5, 1, 16, 16, 6),
        ]
    return [
        _layer(s, c, 2, 32, 64, 64, 56),
        _layer(s, c, 2, 32, 64, 128, 56, stride=2, layout=cl),
        _layer(s, c, 2, 16, 256, 256, 14, dilation=2),
        _layer(s, c, 2, 8, 128, 128, 28, layout=cl, dtype="float64"),
        _layer(s, c, 3, 8, 32, 64, 32),
        _layer(s, c, 3, 4, 64, 64, 32, stride=2, layout=cl),
        _layer(s, c, 3, 2, 16, 32, 48, dilation=2),
        _layer(s, c, 4, 2, 16, 32, 16),
        _layer(s, c, 4, 1, 32, 32, 16, stride=2, layout=cl),
        _layer(s, c, 4, 1, 16, 16, 14, dilation=2),
        _layer(s, c, 5, 1, 16, 16, 10),
        _layer(s, c, 5, 1, 16, 32, 12, stride=2, layout=cl),
    ]


def _gradients(quick):
    s = "gradients"
    out = []
    for kind in ("grad_input", "grad_weight"):
        if quick:
            out += [_layer(s, kind, 3, 2, 16, 16, 12), _layer(s, kind, 4, 1, 16, 16, 8)]
        else:
            out += [_layer(s, kind, 3, 8, 32, 32, 32),
                    _layer(s, kind, 3, 4, 64, 64, 24, stride=2),
                    _layer(s, kind, 4, 2, 16, 16, 16),
                    _layer(s, kind, 4, 1, 32, 32, 12, layout="channels_last")]
    return out


# The acceptance benchmark of an earlier issue, kept by name: NumPy backend
# ``auto`` vs scipy.signal.convolve(method="auto"), ranks 2-5, kernels 3-15.
_CPU_SCI = [  # (shape, kernel, mode, dtype, func, in the quick subset)
    ((512, 512), (3, 3), "same", "float64", "convolve", True),
    ((1024, 1024), (5, 5), "same", "float64", "convolve", False),
    ((256, 256), (15, 15), "same", "float64", "convolve", True),
    (_cube(64, 3), _cube(3, 3), "same", "float64", "convolve", True),
    (_cube(64, 3), _cube(7, 3), "same", "float64", "convolve", False),
    (_cube(48, 3), _cube(15, 3), "same", "float64", "convolve", True),
    (_cube(24, 4), _cube(3, 4), "same", "float64", "convolve", True),
    (_cube(40, 4), _cube(5, 4), "same", "float64", "convolve", False),
    (_cube(16, 4), _cube(9, 4), "same", "float64", "convolve", True),
    (_cube(12, 5), _cube(3, 5), "same", "float64", "convolve", True),
    (_cube(10, 5), _cube(5, 5), "same", "float64", "convolve", False),
    ((256, 256), (7, 7), "valid", "float64", "convolve", False),
    (_cube(48, 3), _cube(5, 3), "full", "float64", "convolve", False),
    (_cube(64, 3), _cube(3, 3), "same", "float32", "convolve", True),
    (_cube(32, 3), _cube(5, 3), "same", "complex64", "correlate", False),
]


def _cpu_scientific(quick):
    return [_sig("cpu_scientific", sh, k, m, dt, fn)
            for sh, k, m, dt, fn, q in _CPU_SCI if q or not quick]


SUITES = {
    "scientific": _scientific,
    "deep_learning": _deep_learning,
    "gradients": _gradients,
    "cpu_scientific": _cpu_scientific,
}
#: Composite suites: the named suites they concatenate.
COMPOSITE = {"all": ("scientific", "deep_learning", "gradients")}


def suite_names():
    """Every name ``--suite`` accepts."""
    return sorted(SUITES) + sorted(COMPOSITE)


def cases(suite, quick=False):
    """The cases of ``suite``: the GPU-scale list, or the CPU-scale ``quick`` one.

    Raises
    ------
    ValueError
        For an unknown suite name (the message lists the valid ones).
    """
    if suite in COMPOSITE:
        return [c for name in COMPOSITE[suite] for c in cases(name, quick)]
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; choose from {suite_names()}")
    return SUITES[suite](quick)
