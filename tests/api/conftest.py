"""Fixtures of the public-API tests.

``backend``/``dev`` are the CUDA-path fixtures of tests/backends/cuda/conftest.py
(the CUDA path through the emulator, and on a GPU, marked ``gpu``; each
skipped where unavailable), for the tests that run a public function there
too.  NumPy-backend tests need no fixture.
"""
from backends.cuda.conftest import Device, backend, dev  # noqa: F401  (re-exported fixtures)
