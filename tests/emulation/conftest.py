"""Fixtures for the CUDA emulator's own tests.

Other test directories can skip the same way by calling
``emulation_support.require_emulation()`` in a fixture (or using the
``emulation`` fixture pattern below).
"""
from pathlib import Path

import pytest

from cupyconv._emulation import EmulatedModule
from emulation_support import require_emulation

KERNELS = Path(__file__).parent / "kernels"

#: Name expressions instantiated from each test kernel file.
NAME_EXPRESSIONS = {
    "basic.cu": ["sgemm_tiled<16>", "reverse_chunks<double>", "affine_strided", "histogram",
                 "half_roundtrip", "block_votes"],
    "warp.cu": ["block_sum", "count_positive", "shuffle_modes"],
    "errors.cu": ["divergent_barrier", "early_exit", "mask_without_self", "shuffle_after_exit",
                  "neighbour<false>", "neighbour<true>"],
    "asan.cu": ["read_past_end", "static_shared_overrun", "dynamic_shared_overrun",
                "signed_overflow", "copy_through_shared"],
    "memory.cu": ["stale_static_shared", "fresh_static_shared", "static_shared_twice",
                  "cp_async_neighbour<true>", "cp_async_neighbour<false>", "cp_async_two_groups",
                  "cp_async_zfill8", "cp_async_to_global", "cp_async_misaligned",
                  "fma_elementwise<float>", "fma_elementwise<double>",
                  "fma_elementwise<cc::complex<double>>"],
}


@pytest.fixture
def emulation():
    """Skip the test when CUDA emulation is unavailable."""
    require_emulation()


@pytest.fixture(scope="session")
def name_expressions():
    """NAME_EXPRESSIONS: kernel file -> name expressions to instantiate."""
    return NAME_EXPRESSIONS


@pytest.fixture(scope="session")
def kernel_path():
    """Path of a test kernel file: ``kernel_path("basic.cu")``."""
    return lambda name: KERNELS / name


@pytest.fixture(scope="session")
def marked_line():
    """``marked_line(file, marker)``: 1-based line of `marker` in a test kernel."""
    def find(name: str, marker: str) -> int:
        for number, line in enumerate((KERNELS / name).read_text().splitlines(), start=1):
            if marker in line:
                return number
        raise LookupError(f"{marker} not found in {name}")
    return find


@pytest.fixture(scope="session")
def emu_module():
    """Factory ``emu_module(file, mode="normal")`` of memoised test modules."""
    cache = {}

    def make(name: str, mode: str = "normal") -> EmulatedModule:
        require_emulation()
        if (name, mode) not in cache:
            cache[name, mode] = EmulatedModule(path=KERNELS / name,
                                               name_expressions=NAME_EXPRESSIONS[name], mode=mode)
        return cache[name, mode]
    return make


@pytest.fixture(scope="session")
def basic_module(emu_module):
    return emu_module("basic.cu")


@pytest.fixture(scope="session")
def warp_module(emu_module):
    return emu_module("warp.cu")


@pytest.fixture(scope="session", params=["normal", "reverse"])
def warp_module_any_schedule(emu_module, request):
    return emu_module("warp.cu", request.param)


@pytest.fixture(scope="session")
def errors_module(emu_module):
    return emu_module("errors.cu")
