"""``plan_conv``: choose the algorithm once, run it many times.

A plan is not a second code path: it holds the problem and the dispatcher's
data-free :class:`~cupyconv.dispatch.Choice`, and calling it runs
:func:`cupyconv.dispatch.run` exactly as :func:`cupyconv.conv` does, with
every safety rule (exact integers, non-finite data, memory) applied to the
arrays of each call that takes the normal path.

A plan is a promise about the problem, not the data: a repeated compiled call of a
plan (the same arrays' key) replays its programs without the checks that only warn.
With ``method="winograd"`` the first call of each key scans the operands for NaN/Inf
and warns (one kernel, one read back); a repeated call does not scan (0
synchronisations, 0 copies).  ``cupyconv.conv(..., method="winograd")`` scans on every
call.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .._vocabulary import ALGORITHMS, BACKENDS, describe_choices
from ..core import args
from ..core.problem import ConvProblem, Operands
from ..dispatch import available_backends, backend_for, choose, get_backend, run
from ..dispatch.dispatcher import NON_FINITE_SPREAD
from .. import config
from .._kernels import program
from .compiled import SEEN_ONCE, CompiledCall, NotCompiled, compiled_method
from .calls import check_bias, check_out, finish, logical_views
from .._typing import Array, ArrayLike, DTypeLike, IntOrSeq, Padding, Scalar, Shape

__all__ = ["plan_conv", "ConvPlan"]

#: Where each backend runs, in :meth:`ConvPlan.explain`'s words.
_WHERE = {"numpy": "the CPU (NumPy)", "cuda": "the GPU (CuPy)",
          "emulated": "the CPU emulator of the CUDA kernels"}


def _fmt_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _fallbacks(ranked):
    """What a call runs when the data fail the first candidate's rule: the next ones in
    order, each under its own rule, down to the first that takes any values."""
    parts = []
    for name in ranked[1:]:
        needs = ALGORITHMS[name].needs
        parts.append(f"{name!r} if {needs}" if needs else repr(name))
        if not needs:
            break
    else:
        parts.append("an error")
    return f"if {ALGORITHMS[ranked[0]].needs}; else " + ", else ".join(parts)


class ConvPlan:
    """A planned :func:`cupyconv.conv`: one problem, one backend, one chosen algorithm.

    Attributes
    ----------
    problem : ConvProblem
    algorithm : str
        What the chooser chose (``method`` if one was given).  With
        ``method="auto"`` a call whose data fails a safety rule of that
        algorithm (``fft``: finite data, integer results exact in float64;
        ``separable``: a kernel that is an outer product; ``winograd``: finite
        data) runs the next candidate whose rule the data pass; ``repr`` names
        them in order.  With ``method="winograd"`` a repeated compiled call (the same
        arrays' key) does not scan for NaN/Inf: the first call of each key scans and
        warns (``explain()`` says so).
    backend : str
    workspace_bytes : int
        Extra memory the algorithm allocates (under the workspace limit).
    flops, bytes_moved : int
        Counted work (see :class:`ConvProblem`).
    frozen : bool
        Whether the plan holds weights (``plan_conv(..., weights=w)``): ``plan(x)``
        uses them, prepared once (see :meth:`__call__`).
    """

    def __init__(self, problem: ConvProblem, backend: Any, choice: Any, method: str,
                 result_dtype: DTypeLike, workspace_limit: Optional[int],
                 weights: Optional[ArrayLike] = None) -> None:
        self.problem = problem
        self.backend = backend.name
        self._backend = backend
        self.choice = choice
        self.method = method
        self.algorithm = choice.algorithm if method == "auto" else method
        self.result_dtype = np.dtype(result_dtype)
        self.workspace_limit = workspace_limit
        kernel_problem, _ = backend.prepare(problem, Operands())
        self.workspace_bytes = int(backend.workspace_bytes(kernel_problem, self.algorithm,
                                                           choice.limit))
        self._weights = None if weights is None else self._freeze(weights)

    @property
    def frozen(self) -> bool:
        return self._weights is not None

    def _checked(self, xp, arrays):
        p = self.problem
        for name, a in arrays.items():
            shape = {"x": p.x_shape, "w": p.w_shape, "bias": (p.out_channels,)}[name]
            if tuple(a.shape) != tuple(shape):
                raise ValueError(f"{name} has shape {tuple(a.shape)}; the plan was made "
                                 f"for {tuple(shape)}")
            if name != "bias" and not np.can_cast(a.dtype, self.result_dtype, casting="safe"):
                raise TypeError(f"{name} has dtype {a.dtype}, which a plan for "
                                f"{self.result_dtype} cannot hold exactly; make a plan for "
                                f"{np.result_type(a.dtype, self.result_dtype)}")

    def _freeze(self, w):
        """The plan's own copy of ``w`` as its backend's kernels read it (channels-first
        logical view: re-laid and rounded once where the chosen algorithm reads another
        layout, ``Backend.prepare_filter``; else a plain copy)."""
        xp = args.array_module_of(w=w)
        w = args.as_array(xp, w)
        self._checked(xp, {"w": w})
        view = logical_views(self.problem, xp, filter=w)["filter"]
        kernel_problem, ops = backend_for(xp, self.backend).prepare(
            self.problem, Operands(filter=view))
        prepared = backend_for(xp, self.backend).prepare_filter(
            kernel_problem, self.algorithm, ops.filter)
        return prepared if prepared is not ops.filter else ops.filter.copy()

    @property
    def flops(self) -> int:
        return self.problem.flops

    @property
    def bytes_moved(self) -> int:
        return self.problem.bytes_moved

    def __repr__(self):
        p = self.problem
        note = ""
        if self.method == "auto" and ALGORITHMS[self.algorithm].needs:
            note = f" ({_fallbacks(self.choice.ranked)})"
        return (f"ConvPlan({p.ndim}-D conv, x{p.x_shape} * w{p.w_shape} -> y{p.y_shape}, "
                f"{self.result_dtype}, backend={self.backend!r}, "
                f"algorithm={self.algorithm!r}{note}, "
                f"workspace={_fmt_bytes(self.workspace_bytes)}, "
                f"flops={self.flops:.3g}, bytes={_fmt_bytes(self.bytes_moved)}; "
                f"{self.explain()})")

    def explain(self) -> str:
        """Which path a call of this plan takes and why: a compiled call (its launch
        programs replayed from the third call with the same arrays' key) or the normal
        path (the dispatcher every call), with the reason; on the CUDA path a second line
        names the kernel configuration its calls run (on operands C-contiguous in its
        layout, under its workspace limit) and its hardware evidence (docs/evidence.md)."""
        return self._path() + self._kernel_line()

    def _kernel_line(self):
        select = getattr(self._backend, "kernel_config", None)
        if select is None:
            return ""
        # the record a call runs: on the plan's operands, under the limit the call runs with
        cfg = select(self.problem, self.algorithm, self.choice.limit)
        from .._kernels import evidence  # the CUDA path's kernel table: loaded with it
        return f"\nkernel: {cfg.describe()}; {evidence.status_line(cfg)}"

    def _path(self):
        if not config.compiled_calls:
            return (f"{self._runs()}; every call is checked and dispatched again "
                    "(cupyconv.config.compiled_calls is off)")
        entries = self.__dict__.get("_compiled")
        last = entries.values()[-1] if entries is not None and len(entries) else None
        if isinstance(last, CompiledCall):
            return f"{self._runs()}; repeated calls replay ({last!r}){self._unscanned()}"
        if isinstance(last, NotCompiled) and last is not SEEN_ONCE:
            return f"{self._runs()}; every call is checked and dispatched again: {last.reason}"
        why = self._backend.compile_refusal(self.problem, self.algorithm)
        if why:
            return f"{self._runs()}; every call is checked and dispatched again: {why}"
        return (f"{self._runs()}; repeated calls replay, from the third call with the same "
                "arrays (shapes, strides, dtypes, alignment), bias, out and settings (the "
                "second records them)"
                + self._unscanned())

    def _runs(self):
        """``runs <algorithm> on <where>``: the first words of :meth:`explain`."""
        return f"runs {self.algorithm} on {_WHERE.get(self.backend, self.backend)}"

    def __str__(self):
        """What ``print(plan)`` shows: the problem, what runs where, and its cost."""
        p = self.problem
        lines = [f"ConvPlan: {p.ndim}-D conv, x{p.x_shape} * w{p.w_shape} -> y{p.y_shape}, "
                 f"{self.result_dtype}"]
        lines += [f"  {line}" for line in self.explain().splitlines()]
        if self.method == "auto" and ALGORITHMS[self.algorithm].needs:
            lines.append(f"  {self.algorithm} {_fallbacks(self.choice.ranked)}")
        lines.append(f"  extra memory {_fmt_bytes(self.workspace_bytes)}; "
                     f"{self.flops:.3g} FLOPs; {_fmt_bytes(self.bytes_moved)} moved")
        return "\n".join(lines)

    def _unscanned(self):
        if self.method not in NON_FINITE_SPREAD:
            return ""
        return ("; a plan promises its problem, not its data: a repeated call does not scan "
                "for NaN/Inf (the first call of each key scans and warns)")

    @compiled_method
    def __call__(self, x: ArrayLike, w: Optional[ArrayLike] = None,
                 bias: Optional[ArrayLike] = None, out: Optional[Array] = None) -> Array:
        """Run the planned convolution on arrays of the planned shapes and dtypes.

        ``w=None``: the weights the plan holds (``plan_conv(..., weights=w)``), as they
        were when the plan was made, prepared once (on the CUDA path's implicit GEMM:
        re-laid channels-last and rounded to TF32 once, so a call re-lays only ``x``).
        A ``w`` given here is read as it is now, on every call."""
        p = self.problem
        if w is None and self._weights is None:
            raise TypeError("this plan holds no weights (plan_conv(..., weights=w)); pass w")
        xp = args.array_module_of(x=x, w=w, bias=bias)
        arrays = {"x": args.as_array(xp, x)}
        if w is not None:
            arrays["w"] = args.as_array(xp, w)
        if bias is not None:
            arrays["bias"] = args.as_array(xp, bias)
        self._checked(xp, arrays)
        backend = backend_for(xp, self.backend)
        check_out(out, p.y_shape, self.result_dtype, x=arrays["x"])
        if w is None:
            if args.array_module_of(x=x, w=self._weights) is not xp:
                raise TypeError("x is not on the device of the plan's weights")
            views = logical_views(p, xp, activation=arrays["x"])
            views["filter"] = program.constant(self._weights)   # fixed for this plan
        else:
            views = logical_views(p, xp, activation=arrays["x"], filter=arrays["w"])
        y, _ = run(p, Operands(**views), backend, method=self.method,
                   workspace_limit=self.workspace_limit,
                   choice=self.choice if backend is self._backend else None)
        return finish(y, p, xp, self.result_dtype, out,
                      check_bias(arrays.get("bias"), p.out_channels, xp, self.result_dtype))


def plan_conv(x_shape: Shape, w_shape: Shape, dtype: DTypeLike, *, stride: IntOrSeq = 1,
              padding: Padding = 0, dilation: IntOrSeq = 1, groups: int = 1,
              padding_mode: str = "constant", cval: Scalar = 0, layout: str = "channels_first",
              method: str = "auto", workspace_limit: Optional[int] = None,
              backend: Optional[str] = None, precision: Optional[str] = None,
              weights: Optional[ArrayLike] = None) -> "ConvPlan":
    """Plan a :func:`cupyconv.conv` once; call the plan on arrays many times.

    Parameters
    ----------
    x_shape, w_shape : tuple of int
        Shapes as :func:`cupyconv.conv` takes them (in `layout` order).
    dtype : dtype
        Result dtype (``result_type`` of x and w); x and w of other dtypes must
        cast to it safely; a bias is cast to it within its kind, as in
        :func:`cupyconv.conv`.
    stride, padding, dilation, groups, padding_mode, cval, layout
        Geometry, as :func:`cupyconv.conv`.
    method : str, optional
        ``auto`` chooses here from the cost model; the data are not seen, so
        each call applies the data safety rules (``repr`` says what a call
        falls back to).
    workspace_limit : int, optional
        Bytes the algorithm may allocate.
    backend : {"numpy", "cuda", "emulated"}, optional
        Default: the backend in force, else ``cuda`` when a GPU is usable,
        else ``numpy``.
    weights : ndarray, optional
        Frozen weights (shape `w_shape`, on the backend's array module): the plan keeps
        its own copy, prepared once for the chosen algorithm, and ``plan(x)`` uses it;
        later writes to ``weights`` are not seen (docs/semantics.md, "Frozen weights").
    precision : {'highest', 'tf32'}, optional
        Arithmetic of float32 data, as in :func:`cupyconv.conv` (``'tf32'``: operands
        rounded to TF32; ``None``: ``cupyconv.config.precision``).

    Returns
    -------
    ConvPlan
        ``plan(x, w, bias=None, out=None)`` (``plan(x)`` with `weights`); ``plan.algorithm``,
        ``plan.workspace_bytes``, ``plan.flops``, ``plan.bytes_moved``.

    Examples
    --------
    >>> import numpy as np, cupyconv
    >>> plan = cupyconv.plan_conv((2, 3, 16, 16, 16, 16), (4, 3, 3, 3, 3, 3), np.float32,
    ...                           padding=1, backend="numpy")
    >>> y = plan(np.ones((2, 3, 16, 16, 16, 16), np.float32),
    ...          np.ones((4, 3, 3, 3, 3, 3), np.float32))
    >>> y.shape
    (2, 4, 16, 16, 16, 16)
    """
    try:
        result = args.native_dtype(dtype)      # ">f8" plans float64: inputs are swapped
    except TypeError:
        raise TypeError(f"dtype must be a NumPy dtype, got {dtype!r}") from None
    args.check_dtype(np.empty(0, result), "dtype")
    args.normalize_method(method)
    workspace_limit = args.normalize_workspace_limit(workspace_limit)
    problem = ConvProblem.create(
        x_shape=x_shape, w_shape=w_shape, stride=stride, padding=padding,
        dilation=dilation, groups=groups, padding_mode=padding_mode, cval=cval,
        layout=layout, dtype=args.problem_dtype(result), flip=False)
    problem = args.with_precision(problem, precision, result)
    if backend is None:
        forced = get_backend()
        backend = forced if forced != "numpy" else (
            "cuda" if "cuda" in available_backends() else "numpy")
    if backend not in BACKENDS or backend not in available_backends():
        raise ValueError(f"backend {backend!r} is not available here; choose "
                         f"{describe_choices(available_backends())}")
    xp = np
    if backend == "cuda":
        import cupy as xp  # optional dependency: only reached when a GPU is usable
    engine = backend_for(xp, backend)
    kernel_problem, _ = engine.prepare(problem, Operands())
    choice = choose(kernel_problem, engine, workspace_limit)
    if method == "auto" and choice.refusal is not None:
        raise type(choice.refusal)(*choice.refusal.args)
    return ConvPlan(problem, engine, choice, method, result, workspace_limit, weights)
