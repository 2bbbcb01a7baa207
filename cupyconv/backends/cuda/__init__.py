"""The CUDA path: one orchestration for CuPy arrays (``cuda``) and the CPU
emulator (``emulated``), behind the :class:`~cupyconv.backends.base.Backend`
interface.

The runner (:mod:`.runners`) is what differs: CuPy arrays and NVRTC cubins,
or NumPy arrays and the same ``.cu`` kernels built with g++.  Forward
algorithms are in :mod:`.algorithms` (``separable``'s 1-D passes in
:mod:`.separable`, ``winograd``'s transform kernels in :mod:`.winograd`, which also
computes stride-1 input gradients), the gradients' column-buffer GEMMs in
:mod:`.gradients`, FFT is the array-module-generic
:mod:`cupyconv.backends.fft_conv` (cuFFT through ``cupyx.scipy.fft``).
"""
from __future__ import annotations

import functools

import numpy as np

from ..._kernels import launch, scan_launch
from ...core.args import LONG_DOUBLE
from ..arrays import in_compute_dtype
from ..base import Backend
from .runners import CupyRunner, DeviceInfo, EmulatedRunner, runner_for
from .table import (COMPILED, LONG_DOUBLE_WHY, NATIVE_BFLOAT16, NATIVE_HALF, TABLE,
                    kernel_problem)

__all__ = ["CudaBackend", "COMPILED", "FREE_MEMORY_FRACTION", "NATIVE_HALF", "NATIVE_BFLOAT16",
           "CupyRunner", "EmulatedRunner", "DeviceInfo", "runner_for"]

#: Fraction of free device memory one algorithm's workspace may use when
#: neither the call nor ``config.workspace_limit`` sets a limit.
FREE_MEMORY_FRACTION = 0.5


def _scannable(arrays):
    """Whether one scan kernel reads ``arrays`` (one dtype it has, at most three)."""
    return (0 < len(arrays) <= scan_launch.MAX_OPERANDS
            and len({a.dtype for a in arrays}) == 1 and scan_launch.scans(arrays[0].dtype))


class CudaBackend(Backend):
    """The CUDA path on one runner (a CuPy device, or the emulator); its algorithms are
    the classes of :mod:`.table`."""

    ALGORITHM_TABLE = TABLE

    def __init__(self, runner):
        self.runner = runner
        self.name = runner.name
        self.xp = runner.xp
        self.call_scope = runner.call_scope

    @functools.cached_property
    def device(self):
        """The runner's static :class:`~.runners.DeviceInfo` (no free-memory query: the
        checks and the cost model read only what does not change), read once: a runner's
        device is fixed."""
        return self.runner.static

    def scan(self, arrays):
        """One :mod:`~cupyconv._kernels.scan_launch` launch over ``arrays`` and one read of
        its 4-word result (1 synchronisation, 1 copy), instead of a min and a max read
        per array and part; the host's scan for dtypes the kernel lacks."""
        arrays = list(arrays)
        if not _scannable(arrays):
            return super().scan(arrays)
        return scan_launch.run_scan(self.runner.loader, self.xp, arrays)

    def check(self, arrays, decide, warns=False):
        """``decide`` on one scan of ``arrays`` as a one-step program (its
        :class:`~cupyconv._kernels.program.Check`), which a compiled call replays: one
        launch, one read back (``decide`` must compare equal from call to call: it is
        part of the program's memo key)."""
        arrays = list(arrays)
        if not _scannable(arrays):
            return super().check(arrays, decide, warns)
        return scan_launch.run_scan(self.runner.loader, self.xp, arrays, decide, warns)

    def kernel_config(self, problem, algorithm, workspace_limit=None):
        """The :class:`~cupyconv._kernels.kernel_config.KernelConfig` ``algorithm`` runs
        ``problem`` with on C-contiguous operands under ``workspace_limit`` (its table
        entry's one kernel choice, ``table.CudaAlgorithm.kernel_config``: a split-K whose
        workspaces pass the limit runs unsplit)."""
        entry = self.algorithm(algorithm)
        return entry.kernel_config(self.kernel_problem(entry.computed(problem)[0]), self.device,
                                   workspace_limit)

    def default_workspace_limit(self):
        return int(self.runner.device.free_memory * FREE_MEMORY_FRACTION)

    def available_memory(self):
        return int(self.runner.device.free_memory)

    kernel_problem = staticmethod(kernel_problem)

    def prepare(self, problem, operands):
        """Views the kernels can address: uint64 as int64, unaddressable operands copied
        (float16 stays float16: ``run`` widens what does not compute it natively)."""
        if problem.dtype in LONG_DOUBLE:
            raise TypeError(LONG_DOUBLE_WHY.format(dtype=problem.dtype))
        if problem.layout != "channels_first":          # operands are channels-first views
            problem = problem.with_(layout="channels_first")
        x = operands.activation
        if x is not None and x.dtype != problem.dtype:
            operands = in_compute_dtype(problem, operands)  # the kernels take one dtype
        views, arrays = {}, {}
        for role in ("activation", "filter", "output"):
            a = getattr(operands, role)
            if a is not None:
                views[role] = a.view(np.int64) if a.dtype == np.uint64 else a
        for role in launch.unaddressable(**views):
            views[role] = views[role].copy()   # a record field, a misaligned view (a fresh,
        for role, a in views.items():          # aligned array)
            if a is not getattr(operands, role):
                arrays[role] = a
        if arrays:
            operands = operands.replace(**arrays)
        if problem.dtype == np.uint64:
            problem = kernel_problem(problem)
        return problem, operands

    def free_cached(self):
        self.runner.free_cached()

    def synchronize(self):
        self.runner.synchronize()
