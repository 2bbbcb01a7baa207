"""Run a planned problem on the backend in force with the chosen algorithm."""
from __future__ import annotations

import numpy as np

from . import _numpy_backend, _select, config
from ._backend import get_backend

__all__ = ["select_algorithm", "execute", "candidates_for", "model_choice"]


def _finite(a):
    return a.dtype.kind not in "fc" or bool(np.isfinite(a).all())


def candidates_for(problem, x, w, backend="numpy"):
    """Algorithms that give exact-enough results for these operands.

    FFT is left out for integer data whose result could round (scipy's
    guard) and for non-finite data (it would spread NaN/Inf everywhere).
    """
    names = list(_numpy_backend.ALGORITHMS)
    cval_finite = bool(np.isfinite(problem.cval)) or problem.padding_mode != "constant"
    if not (_numpy_backend.fft_exact_enough(problem, x, w) and _finite(x) and _finite(w)
            and cval_finite):
        names.remove("fft")
    return names


def model_choice(problem, x, w, xp=np, workspace_limit=None):
    """``(candidate names, cost-model choice)`` on the backend in force."""
    backend = get_backend(xp)
    if backend != "numpy" or xp is not np:
        from . import _engine
        return _engine.model_choice(problem, x, w, backend, xp, workspace_limit)
    names = candidates_for(problem, x, w)
    if workspace_limit is None:
        workspace_limit = config.workspace_limit
    return names, _select.choose(problem, names, workspace_limit)


def select_algorithm(problem, x, w, method="auto", workspace_limit=None, run=None):
    """Resolve ``method`` to one algorithm name for this problem.

    ``run`` (``name -> result``) is only used when ``config.autotune`` is on.
    """
    if method != "auto":
        return method
    if workspace_limit is None:
        workspace_limit = config.workspace_limit
    names = candidates_for(problem, x, w)
    if run is not None:
        tuned = _select.autotuned(problem, names, run)
        if tuned is not None:
            return tuned
    return _select.choose(problem, names, workspace_limit)


def execute(problem, x, w, *, method="auto", workspace_limit=None, xp=np, stats=None):
    """Compute ``y`` ``(N, K, *O)`` for logical channels-first ``x`` and ``w``.

    Returns ``(y, algorithm)``.
    """
    backend = get_backend(xp)
    if backend != "numpy" or xp is not np:
        from . import _engine  # the CUDA orchestration (CuPy and emulated)
        return _engine.execute(problem, x, w, method=method,
                               workspace_limit=workspace_limit, xp=xp, stats=stats,
                               backend=backend)
    if workspace_limit is None:
        workspace_limit = config.workspace_limit

    def run(name, **extra):
        return _numpy_backend.run(problem, x, w, name, workspace_limit=workspace_limit,
                                  stats=stats, **extra)

    algorithm = select_algorithm(problem, x, w, method, workspace_limit, run)
    # auto only picks fft for finite data: the FFT path need not check again
    return run(algorithm, known_finite=method == "auto"), algorithm
