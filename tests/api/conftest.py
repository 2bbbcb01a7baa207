"""Fixtures of the public-API tests.

``backend``/``dev`` are the CUDA-path fixtures of tests/backends/cuda/conftest.py
(the CUDA path through the emulator, and on a GPU, marked ``gpu``; each
skipped where unavailable), for the tests that run a public function there
too; ``any_dev`` adds the NumPy backend (one body on all three).  NumPy-backend
tests need no fixture.
"""
from backends.cuda.conftest import Device, any_dev, backend, dev  # noqa: F401  (re-exported)
