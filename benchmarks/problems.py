"""Named benchmark problem sets.

Each case is a dict with ``kind`` (``"signal"`` for convolve/correlate,
``"conv"`` for batched multi-channel conv), shapes and geometry.  ``quick``
cases are a subset that keeps ``--quick`` runs to about a minute on a
2-core CPU.
"""
from __future__ import annotations

__all__ = ["SUITES", "cases"]


def _signal(shape, kernel, mode="same", dtype="float64", quick=False, func="convolve"):
    return dict(kind="signal", func=func, shape=tuple(shape), kernel=tuple(kernel),
                mode=mode, dtype=dtype, quick=quick,
                name=f"{func} {len(shape)}-D {'x'.join(map(str, shape))} * "
                     f"{'x'.join(map(str, kernel))} {mode} {dtype}")


# Single-channel N-D convolution, ranks 2-5, kernels 3 to 15: the acceptance
# benchmark of the NumPy backend against scipy.signal.convolve(method="auto").
CPU_SCIENTIFIC = [
    _signal((512, 512), (3, 3), quick=True),
    _signal((1024, 1024), (5, 5)),
    _signal((256, 256), (15, 15), quick=True),
    _signal((64, 64, 64), (3, 3, 3), quick=True),
    _signal((64, 64, 64), (7, 7, 7)),
    _signal((48, 48, 48), (15, 15, 15), quick=True),
    _signal((24, 24, 24, 24), (3, 3, 3, 3), quick=True),
    _signal((40, 40, 40, 40), (5, 5, 5, 5)),
    _signal((16, 16, 16, 16), (9, 9, 9, 9), quick=True),
    _signal((12, 12, 12, 12, 12), (3, 3, 3, 3, 3), quick=True),
    _signal((10, 10, 10, 10, 10), (5, 5, 5, 5, 5)),
    _signal((256, 256), (7, 7), mode="valid"),
    _signal((48, 48, 48), (5, 5, 5), mode="full"),
    _signal((64, 64, 64), (3, 3, 3), dtype="float32", quick=True),
    _signal((32, 32, 32), (5, 5, 5), dtype="complex64", func="correlate"),
]

SUITES = {"cpu_scientific": CPU_SCIENTIFIC}


def cases(suite, quick=False):
    """The cases of ``suite`` (all, or the quick subset)."""
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; choose from {sorted(SUITES)}")
    return [c for c in SUITES[suite] if c["quick"] or not quick]
