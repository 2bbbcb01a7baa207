"""What one data scan found (:mod:`.scan_launch` on the device, ``host_scan`` of
:mod:`cupyconv.backends.arrays` on the host): a module of its own, so the NumPy path reads
the type without loading the launchers and the kernel table."""
from __future__ import annotations

from typing import NamedTuple, Tuple

__all__ = ["ScanResult"]


class ScanResult(NamedTuple):
    """What one scan found, per operand (see :mod:`.scan_launch`'s docstring)."""

    finite: Tuple[bool, ...]
    magnitude: Tuple[object, ...]

    @property
    def all_finite(self):
        """No operand holds a NaN or an infinity."""
        return all(self.finite)
