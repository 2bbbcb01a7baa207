"""Threads for the CPU algorithms: blocks of work on a pool, BLAS one thread per block.

NumPy's copies, ufuncs and ``matmul`` release the GIL, so independent blocks (a column
block and its GEMM, a chunk of a depthwise tap loop) run side by side on Python threads,
one per usable core.  Inside :func:`parallel_map` BLAS runs one thread per call
(``threadpoolctl``): many single-threaded GEMMs on their own blocks keep every core busy
without OpenBLAS's spinning thread barriers, which on a loaded machine made one threaded
``(32, 864) @ (864, 448)`` take 20 ms against 0.4 ms single-threaded (measured on the
shared 2-core VM, load 4-6).  Each block writes its own part of the result, and partial
sums are added in block order by the caller: results do not depend on the threads.

Without ``threadpoolctl`` the blocks run one after another on the calling thread (BLAS
keeps its own threads).  ``cupyconv.config.cpu_threads`` caps the lanes (:func:`workers`).
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import math
import os
import threading

import numpy as np

from ... import config
from ..._lru import cached
from ..arrays import REUSE_FROM_BYTES, reused

__all__ = ["workers", "parallel_map", "blas_controller", "single_blas", "Scratch"]

_POOL = None
_LOCK = threading.Lock()


def _cores():
    """Cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:                       # not on Linux
        return max(1, os.cpu_count() or 1)


def workers():
    """Threads the CPU work may use at once: the cores this process may run on, at most
    ``cupyconv.config.cpu_threads`` (``None``: no cap)."""
    cores, limit = _cores(), config.cpu_threads
    return cores if limit is None else min(cores, limit)


@cached(maxsize=1, keep=True)
def blas_controller():
    """The ``threadpoolctl`` controller of the loaded BLAS, or ``None`` without it."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    return ThreadpoolController()


def _pool():
    global _POOL
    with _LOCK:
        if _POOL is None:
            _POOL = concurrent.futures.ThreadPoolExecutor(
                max_workers=_cores(), thread_name_prefix="cupyconv-cpu")
        return _POOL


_ACTIVE = threading.local()


def _after_fork():
    """A forked child has none of the parent's pool threads (a pool copied with the
    process would wait on them forever) and may have copied a held lock: start afresh."""
    global _POOL, _LOCK
    _POOL, _LOCK = None, threading.Lock()
    _USERS[:] = [0, None]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def parallel_map(fn, items, lanes=None):
    """``[fn(item) for item in items]``, at most ``lanes`` (default: one per core) at
    once with BLAS single-threaded; in order.  Serial for one lane or item, without
    ``threadpoolctl``, or when called from one of the pool's own threads.

    Each lane is one long task (the calling thread is one of them) that takes the next
    item until none is left: one pool hand-off per lane, not per item (a future per
    item was two GIL hand-offs and ~20 us of Python per block, on the 3-D layer's 256
    blocks of ~0.2 ms).  The first exception stops the lanes and is raised.
    """
    items = list(items)
    available = workers()
    lanes = available if lanes is None else min(lanes, available)
    controller = blas_controller()
    if len(items) < 2 or lanes < 2 or controller is None or getattr(
            _ACTIVE, "inside", False):
        return [fn(item) for item in items]
    out = [None] * len(items)
    order = iter(range(len(items)))      # next() on it is atomic under the GIL
    failed = []

    def lane():
        _ACTIVE.inside = True
        try:
            for i in order:
                if failed:
                    return
                out[i] = fn(items[i])
        except BaseException as exc:     # noqa: B036 -- raised again by the caller
            failed.append(exc)
        finally:
            _ACTIVE.inside = False

    with _single_blas(controller):
        others = [_pool().submit(lane) for _ in range(min(lanes, len(items)) - 1)]
        lane()
        for f in others:
            f.result()
    if failed:
        raise failed[0]
    return out


class Scratch(threading.local):
    """One thread's scratch arrays, reused call part after part (block after block) and
    from call to call: :meth:`take` hands out a leading slice of a buffer as large as the
    largest asked for under ``name`` (a fresh array per block was a quarter of the
    depthwise loop's time, and the gemm blocks' column buffers are reused the same way).
    Unfilled buffers of :data:`~cupyconv.backends.arrays.REUSE_FROM_BYTES` or more
    outlive the call (:func:`~cupyconv.backends.arrays.reused`): each call's fresh
    megabytes were page faults (docs/benchmarks/repeat_calls.md)."""

    def take(self, name, shape, dtype, fill=None):
        """An array ``shape`` of ``dtype``, the leading slice of this thread's buffer
        ``name`` (filled with ``fill`` when it is made, and then this object's alone; its
        contents are otherwise whatever the last user left, in this call or an
        earlier one)."""
        have = self.__dict__.get(name)
        if have is None or have.shape[1:] != shape[1:] or have.shape[0] < shape[0] \
                or have.dtype != dtype:
            if fill is not None:
                have = np.full(shape, fill, dtype)
            elif math.prod(shape) * np.dtype(dtype).itemsize < REUSE_FROM_BYTES:
                have = np.empty(shape, dtype)      # from glibc's heap: nothing to fault
            else:
                have = reused(("scratch", name), shape, dtype, grow=True)
            self.__dict__[name] = have
        return have[:shape[0]]


_USERS = [0, None]      # callers inside parallel_map, and the BLAS limit they share


@contextlib.contextmanager
def single_blas():
    """BLAS at one thread inside (the guard :func:`parallel_map` runs its lanes under;
    a no-op without ``threadpoolctl``): host-side linear algebra on small matrices (the
    separability check's SVDs) pays OpenBLAS's thread barriers on a loaded machine."""
    controller = blas_controller()
    if controller is None:
        yield
        return
    with _single_blas(controller):
        yield


@contextlib.contextmanager
def _single_blas(controller):
    """BLAS at one thread while any caller is inside (calls from several user threads
    share one limit: the first sets it, the last restores the user's setting)."""
    with _LOCK:
        if _USERS[0] == 0:
            _USERS[1] = controller.limit(limits=1, user_api="blas")
        _USERS[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _USERS[0] -= 1
            if _USERS[0] == 0:
                _USERS[1].restore_original_limits()
                _USERS[1] = None
