"""Launches prebuilt for ``cupy.cuda.driver.launchKernel`` (compiled calls on CuPy).

``RawKernel.__call__`` marshals every argument on every call (a ``CArray`` per array, a
heap-allocated ``CScalar`` for the parameter struct).  A compiled call's launches never
change but for their pointers, so :class:`PrebuiltLaunch` keeps the parameter struct's
bytes and a ``void*`` argument array once, per thread a ``uint64`` array of pointer slots
that the argument array points into, and per call writes the operands' pointers into the
slots and calls the driver.  ``cuLaunchKernel`` copies the parameters when it is called,
so a slot array is free again when it returns.

Off by default (``cupyconv.config.prebuilt_launches``) until a device check runs it;
tested on the CPU against a stand-in of the driver that reads back what it was given.
"""
from __future__ import annotations

import dataclasses
import threading

import numpy as np

from ..._kernels.program import Launch

__all__ = ["PrebuiltLaunch", "prebuilt_program", "dim3"]


class PrebuiltLaunch:
    """A callable ``(grid, block, args, shared_mem=0)`` like a ``RawKernel``, launching
    its prebuilt launch (its grid, block, shared memory and parameter struct; only the
    pointers of ``args[1:]`` are read) through ``driver.launchKernel`` on ``stream()``."""

    def __init__(self, launch, function_ptr, driver, stream):
        self.launch = launch
        self._fptr = int(function_ptr)
        self._driver, self._stream = driver, stream
        self._params = np.array(launch.params)          # owned bytes of the struct
        self._dims = tuple(dim3(launch.grid)) + tuple(dim3(launch.block))
        self._smem = int(launch.shared_mem)
        self._local = threading.local()

    def _buffers(self):
        """This thread's ``(pointer slots, address of the void* argument array)``."""
        mine = self._local.__dict__.get("buffers")
        if mine is None:
            n = len(self.launch.slots)
            slots = np.zeros(max(n, 1), np.uint64)
            argv = np.zeros(n + 1, np.uint64)
            argv[0] = self._params.ctypes.data
            argv[1:] = slots.ctypes.data + 8 * np.arange(n, dtype=np.uint64)
            mine = self._local.buffers = (slots, argv, int(argv.ctypes.data))
        return mine

    def __call__(self, grid, block, args, shared_mem=0):
        slots, _, argv = self._buffers()
        for i in range(1, len(args)):
            slots[i - 1] = args[i].data.ptr      # (a launch's pointer slots are arrays)
        self._driver.launchKernel(self._fptr, *self._dims, self._smem, self._stream(),
                                  argv, 0)


def dim3(dims):
    """``dims`` (an int or a tuple) as the three extents of a CUDA grid or block."""
    dims = tuple(int(d) for d in (dims if isinstance(dims, tuple) else (dims,)))
    return dims + (1,) * (3 - len(dims))


def prebuilt_program(program, driver, stream):
    """``program`` with each launch's function a :class:`PrebuiltLaunch` (the kernel's
    ``CUfunction`` from ``RawKernel.kernel.ptr``, loaded on the current device); a
    program whose functions are not CuPy kernels is returned as it is."""
    steps = []
    for step in program.steps:
        if type(step) is Launch:
            ptr = getattr(getattr(step.function, "kernel", None), "ptr", None)
            if ptr is None:
                return program
            step = dataclasses.replace(step, function=PrebuiltLaunch(step, ptr, driver, stream))
        steps.append(step)
    return dataclasses.replace(program, steps=tuple(steps))
