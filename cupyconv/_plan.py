"""``plan_conv``: choose the algorithm once, run it many times."""
from __future__ import annotations

import numpy as np

from . import _args, _dispatch, _numpy_backend, _select
from ._backend import available_backends, get_backend
from ._problem import ConvProblem

__all__ = ["plan_conv", "ConvPlan"]


def _fmt_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


class ConvPlan:
    """A planned :func:`cupyconv.conv`: one problem, one algorithm, one backend.

    Attributes
    ----------
    problem : ConvProblem
    algorithm : str
    backend : str
    workspace_bytes : int
        Extra memory the algorithm allocates (under ``workspace_limit``).
    flops, bytes_moved : int
        Counted work (see :class:`ConvProblem`).
    """

    def __init__(self, problem, algorithm, backend, workspace_bytes, workspace_limit,
                 result_dtype):
        self.problem = problem
        self.algorithm = algorithm
        self.backend = backend
        self.workspace_bytes = int(workspace_bytes)
        self.workspace_limit = workspace_limit
        self.result_dtype = np.dtype(result_dtype)

    @property
    def flops(self):
        return self.problem.flops

    @property
    def bytes_moved(self):
        return self.problem.bytes_moved

    def __repr__(self):
        p = self.problem
        return (f"ConvPlan({p.ndim}-D conv, x{p.x_shape} * w{p.w_shape} -> y{p.y_shape}, "
                f"{self.result_dtype}, backend={self.backend!r}, "
                f"algorithm={self.algorithm!r}, workspace={_fmt_bytes(self.workspace_bytes)}, "
                f"flops={self.flops:.3g}, bytes={_fmt_bytes(self.bytes_moved)})")

    def __call__(self, x, w, bias=None, out=None):
        """Run the planned convolution on arrays of the planned shapes."""
        from ._conv import finish_conv, logical_views
        from ._signal import _check_out
        p = self.problem
        for name, a, shape in (("x", x, p.x_shape), ("w", w, p.w_shape)):
            if tuple(a.shape) != tuple(shape):
                raise ValueError(f"{name} has shape {tuple(a.shape)}; the plan was made "
                                 f"for {tuple(shape)}")
        x_cf, w_cf, bias, xp = logical_views(p, x, w, bias)
        _check_out(out, p.y_shape, self.result_dtype, x=x_cf)
        with _backend_scope(self.backend, xp):
            y, _ = _dispatch.execute(p, x_cf, w_cf, method=self.algorithm,
                                     workspace_limit=self.workspace_limit, xp=xp)
        return finish_conv(y, p, bias, xp, self.result_dtype, out)


def _backend_scope(backend, xp):
    import contextlib
    from ._backend import use_backend
    if backend == "emulated":
        return use_backend("emulated")
    return contextlib.nullcontext()


def plan_conv(x_shape, w_shape, dtype, *, stride=1, padding=0, dilation=1, groups=1,
              padding_mode="constant", cval=0, layout="channels_first", method="auto",
              workspace_limit=None, backend=None):
    """Plan a :func:`cupyconv.conv` once; call the plan on arrays many times.

    Parameters
    ----------
    x_shape, w_shape : tuple of int
        Shapes as :func:`cupyconv.conv` takes them (in `layout` order).
    dtype : dtype
        Result dtype (``result_type`` of x, w and bias).
    stride, padding, dilation, groups, padding_mode, cval, layout
        Geometry, as :func:`cupyconv.conv`.
    method : str, optional
        ``auto`` chooses here, from the cost model (data are not inspected:
        the ``fft`` path warns at call time on non-finite data).
    workspace_limit : int, optional
        Bytes the algorithm may allocate.
    backend : {"numpy", "cuda", "emulated"}, optional
        Default: the backend in force, else ``cuda`` when a GPU is usable,
        else ``numpy``.

    Returns
    -------
    ConvPlan
        ``plan(x, w, bias=None, out=None)``; ``plan.algorithm``,
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
    result = np.dtype(dtype)
    problem = ConvProblem.create(
        x_shape=x_shape, w_shape=w_shape, stride=stride, padding=padding,
        dilation=dilation, groups=groups, padding_mode=padding_mode, cval=cval,
        layout=layout, dtype=_args.compute_dtype(result), flip=False)
    _args.normalize_method(method)
    if backend is None:
        forced = get_backend()
        backend = forced if forced != "numpy" else (
            "cuda" if "cuda" in available_backends() else "numpy")
    if backend not in available_backends():
        raise ValueError(f"backend {backend!r} is not available here; "
                         f"available: {available_backends()}")
    if backend == "numpy":
        names = list(_numpy_backend.ALGORITHMS)
        algorithm = method if method != "auto" else _select.choose(
            problem, names, workspace_limit)
        algorithm = _numpy_backend.ALIASES.get(algorithm, algorithm)
        workspace = (min(problem.workspace_bytes("gemm", problem.batch),
                         workspace_limit or _numpy_backend.DEFAULT_CHUNK_BYTES)
                     if algorithm == "gemm" else problem.workspace_bytes(algorithm))
    else:
        from . import _engine
        from ._engine import algorithms
        runner = _engine.get_runner(backend, _engine.array_module(backend))
        cf = problem.with_(layout="channels_first")
        if method == "auto":
            names = [n for n in algorithms.ALGORITHMS
                     if algorithms.can_implement(cf, n, runner.device)[0]]
            algorithm = _engine.choose(cf, names, runner, workspace_limit)
        else:
            algorithm = method
        workspace = algorithms.workspace_bytes(
            cf, algorithm, _engine.workspace_limit_for(runner, workspace_limit))
    return ConvPlan(problem, algorithm, backend, workspace, workspace_limit, result)
