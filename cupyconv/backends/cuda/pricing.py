"""The CUDA algorithm table's prices by ``method=`` name, for callers that hold a device
and not a backend (the fitting and reference benchmarks, the cost model's tests): each
answer is the named class's own (``table.TABLE``)."""
from __future__ import annotations

from . import cost
from .table import TABLE

__all__ = ["predict_times", "efficiency_key", "calibrate", "kernel_config"]

_BY_NAME = {cls.name: cls for cls in TABLE}


def predict_times(problem, device, names, efficiency=None):
    """``{algorithm: seconds}`` for each of ``names`` the table has on ``device``
    (``efficiency``: a full mapping replacing ``cost.efficiencies``)."""
    return {name: _BY_NAME[name].predicted(problem, device, efficiency)
            for name in names if name in _BY_NAME}


def efficiency_key(problem, device, name):
    """The ``cost.EFFICIENCY`` entry that sets ``name``'s prediction for ``problem``."""
    return _BY_NAME[name].efficiency_key(problem, device)


def calibrate(problem, device, name, seconds):
    """``cost.calibrate`` of the algorithm ``name``."""
    return cost.calibrate(problem, device, _BY_NAME[name], seconds)


def kernel_config(problem, device, algorithm="implicit_gemm"):
    """The :class:`~cupyconv._kernels.kernel_config.KernelConfig` ``algorithm`` runs
    ``problem`` (channels-first operands) with on ``device``."""
    return _BY_NAME[algorithm].kernel_config(problem, device)
