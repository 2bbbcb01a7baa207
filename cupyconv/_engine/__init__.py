"""The CUDA engine: one orchestration for CuPy arrays and the emulator.

:func:`execute` resolves the algorithm (cost model from counted work and the
device's queried properties, honouring ``workspace_limit``; or measurement
when ``config.autotune`` is on), runs it through a runner, and on
out-of-memory frees the pool's cached blocks and falls back to the next
algorithm down by workspace, ending at the zero-workspace ``implicit_gemm``.
"""
from __future__ import annotations

import collections

import numpy as np

from .. import _select, config
from . import algorithms, cost
from .runners import (CupyRunner, EmulatedRunner, OutOfMemoryError,
                      clear_module_caches, runner_for)

__all__ = ["execute", "choose", "candidates", "get_runner", "array_module", "model_choice",
           "OutOfMemoryError", "clear_caches", "runner_for", "CupyRunner", "EmulatedRunner"]

#: Fraction of free device memory ``auto`` lets one algorithm's workspace use
#: when no ``workspace_limit`` is given.
FREE_MEMORY_FRACTION = 0.5

_runners: "collections.OrderedDict" = collections.OrderedDict()


def array_module(backend):
    """The array module a CUDA-path backend runs on: CuPy, or NumPy (emulated)."""
    if backend == "cuda":
        import cupy
        return cupy
    return np


def get_runner(backend, xp):
    """The memoised runner of ``backend`` for arrays of module ``xp``."""
    if backend == "cuda":
        if xp.__name__ != "cupy":
            raise TypeError("the 'cuda' backend needs CuPy arrays; got NumPy arrays "
                            "(use cupy.asarray, or the 'emulated' backend)")
        key = ("cuda", xp.cuda.Device().id)
    elif backend == "emulated":
        if xp is not np:
            raise TypeError("the 'emulated' backend runs on NumPy arrays; got CuPy arrays")
        key = ("emulated",)
    else:
        raise TypeError(f"backend {backend!r} cannot run {xp.__name__} arrays")
    found = _runners.get(key)
    if found is None:
        found = _runners[key] = runner_for(backend)
    return found


def candidates(problem, x, w, runner):
    """Algorithms that can run ``problem`` exactly enough on ``runner``'s device."""
    from .._dispatch import candidates_for
    numeric_ok = set(candidates_for(problem, x, w))       # fft guards (NaN, integers)
    out = []
    for name in algorithms.ALGORITHMS:
        if name == "fft" and "fft" not in numeric_ok:
            continue
        ok, _ = algorithms.can_implement(problem, name, runner.device)
        if ok:
            out.append(name)
    return out


def workspace_limit_for(runner, workspace_limit):
    if workspace_limit is None:
        workspace_limit = config.workspace_limit
    if workspace_limit is None:
        return int(runner.device.free_memory * FREE_MEMORY_FRACTION)
    return int(workspace_limit)


def choose(problem, names, runner, workspace_limit=None):
    """Cheapest predicted algorithm whose workspace fits the limit."""
    limit = workspace_limit_for(runner, workspace_limit)
    fitting = [n for n in names
               if (algorithms.gemm_batch_chunk(problem, limit) >= 1 if n == "gemm"
                   else algorithms.workspace_bytes(problem, n) <= limit)]
    if not fitting:
        fitting = [n for n in names if algorithms.workspace_bytes(problem, n) == 0]
    if not fitting:
        raise OutOfMemoryError(f"no algorithm fits workspace_limit={limit} bytes")
    times = cost.predict_times(problem, runner.device, fitting)
    return min(fitting, key=times.get)


def model_choice(problem, x, w, backend, xp, workspace_limit=None):
    """``(candidates, cost-model choice)`` for ``problem`` on ``backend``."""
    runner = get_runner(backend, xp)
    cf = problem.with_(layout="channels_first")
    names = candidates(cf, x, w, runner)
    return names, choose(cf, names, runner, workspace_limit)


def _fallbacks(problem, first, names):
    """``first``, then the rest by decreasing workspace, zero-workspace last."""
    rest = [n for n in names if n != first]
    rest.sort(key=lambda n: (-algorithms.workspace_bytes(problem, n), n != "direct"))
    return [first] + rest


def _as_kernel_dtype(problem, x, w):
    """uint64 runs in the int64 kernels (two's complement: same bits)."""
    if problem.dtype == np.uint64:
        return problem.with_(dtype=np.dtype(np.int64)), x.view(np.int64), w.view(np.int64)
    return problem, x, w


def execute(problem, x, w, *, method="auto", workspace_limit=None, xp=np, stats=None,
            backend="cuda"):
    """Compute ``y`` ``(N, K, *O)``; returns ``(y, algorithm)``."""
    runner = get_runner(backend, xp)
    problem = problem.with_(layout="channels_first")    # x, w are channels-first views
    if problem.is_empty:
        return xp.zeros((problem.batch, problem.out_channels) + problem.out_shape,
                        dtype=problem.dtype), "direct"
    orig_dtype = problem.dtype
    problem, x, w = _as_kernel_dtype(problem, x, w)
    names = candidates(problem, x, w, runner)
    limit = workspace_limit_for(runner, workspace_limit)
    if method == "auto":
        def run(name):
            out = algorithms.run(problem, x, w, name, runner, limit)
            runner.synchronize()
            return out
        first = _select.autotuned(problem, names, run, extra=(backend,)) or choose(
            problem, names, runner, limit)
    else:
        ok, why = algorithms.can_implement(problem, method, runner.device)
        if not ok:
            raise ValueError(f"method={method!r} cannot run this problem: {why}")
        first = method
        names = list(dict.fromkeys([method] + names))
    runner.peak_workspace = 0
    tried = []
    for name in _fallbacks(problem, first, names):
        try:
            y = algorithms.run(problem, x, w, name, runner, limit)
        except OutOfMemoryError as exc:
            tried.append(f"{name}: {exc}")
            runner.free_cached()
            continue
        if stats is not None:
            stats.update(algorithm=name, peak_workspace=runner.peak_workspace,
                         fallbacks=tried)
        if orig_dtype == np.uint64:
            y = y.view(np.uint64)
        return y, name
    raise OutOfMemoryError("every algorithm ran out of memory: " + "; ".join(tried))


def clear_caches():
    """Drop runners, loaded modules and autotune choices."""
    _runners.clear()
    clear_module_caches()
    _select.clear_cache()
    from .._compile.loader import clear_module_cache
    clear_module_cache()
