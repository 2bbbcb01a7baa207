"""Fixtures of the CUDA-path tests: one test body, run on every CUDA-path backend.

``backend`` is ``"emulated"`` (the CUDA kernels on the CPU, NumPy arrays)
and ``"cuda"`` (CuPy arrays on a GPU, marked ``gpu``); each is skipped where
it is not available.  ``to_dev``/``to_host`` move test arrays accordingly.
"""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv


def _param(name):
    marks = [pytest.mark.gpu] if name == "cuda" else []
    return pytest.param(name, marks=marks, id=name)


@pytest.fixture(params=[_param("emulated"), _param("cuda")])
def backend(request):
    name = request.param
    if name not in cupyconv.available_backends():
        pytest.skip(f"backend {name!r} is not available here")
    return name


@pytest.fixture
def cupy():
    """CuPy, or a skip without a CUDA device (the GPU-only tests)."""
    if "cuda" not in cupyconv.available_backends():
        pytest.skip("no CUDA device")
    import cupy
    return cupy


class Device:
    """Array movement and the backend scope for one backend ("numpy", "emulated", "cuda")."""

    def __init__(self, name):
        self.name = name
        if name == "cuda":
            import cupy
            self.xp = cupy
        else:
            self.xp = np

    def to_dev(self, a):
        return self.xp.asarray(a) if a is not None else None

    def to_host(self, a):
        return a.get() if hasattr(a, "get") else np.asarray(a)

    def scope(self):
        """``use_backend`` for the NumPy-array backends; CuPy arrays pick "cuda" themselves."""
        import contextlib
        if self.name != "cuda":
            return cupyconv.use_backend(self.name)
        return contextlib.nullcontext()


@pytest.fixture
def dev(backend):
    return Device(backend)


@pytest.fixture(params=["numpy", _param("emulated"), _param("cuda")])
def any_dev(request):
    """:class:`Device` of every backend, the NumPy one included (one body, all three)."""
    if request.param not in cupyconv.available_backends():
        pytest.skip(f"backend {request.param!r} is not available here")
    return Device(request.param)
