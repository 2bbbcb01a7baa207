"""Fixtures of the gradient tests.

``backend``/``dev`` are the engine tests' fixtures (tests/engine/conftest.py):
the CUDA path through the emulator, and on a GPU (marked ``gpu``), each
skipped where unavailable.  NumPy-backend tests need no fixture.
"""
from engine.conftest import Device, backend, dev  # noqa: F401  (re-exported fixtures)
