"""Synchronisation bugs become EmulationError instead of hangs or crashes."""
import numpy as np
import pytest

from cupyconv._emulation import EmulationError


@pytest.fixture
def where(marked_line):
    """``where(marker)``: the "errors.cu:<line>" an error message must name."""
    return lambda marker: f"errors.cu:{marked_line('errors.cu', marker)}"


def test_divergent_barrier_names_both_lines(errors_module, where):
    y = np.zeros(64, np.int32)
    with pytest.raises(EmulationError, match="divergent barrier") as info:
        errors_module.get_function("divergent_barrier")(1, 64, (y,))
    assert where("MARK_EVEN") in str(info.value)
    assert where("MARK_ODD") in str(info.value)


def test_exited_threads_at_barrier(errors_module, where):
    y = np.zeros(64, np.int32)
    with pytest.raises(EmulationError, match="exited") as info:
        errors_module.get_function("early_exit")(2, 64, (y,))
    assert where("MARK_EARLY") in str(info.value)
    assert "block (0,0,0)" in str(info.value)


def test_mask_without_own_lane(errors_module, where):
    y = np.zeros(32, np.int32)
    with pytest.raises(EmulationError, match="does not contain its own lane") as info:
        errors_module.get_function("mask_without_self")(1, 32, (y,))
    assert where("MARK_MASK") in str(info.value)


def test_shuffle_with_exited_lane(errors_module, where):
    y = np.zeros(32, np.int32)
    with pytest.raises(EmulationError, match="has exited") as info:
        errors_module.get_function("shuffle_after_exit")(1, 32, (y,))
    assert where("MARK_EXITED") in str(info.value)


def test_module_usable_after_error(errors_module, where):
    test_divergent_barrier_names_both_lines(errors_module, where)
    x = np.arange(64, dtype=np.float32)
    y = np.zeros_like(x)
    errors_module.get_function("neighbour<true>")(1, 64, (x, y), shared_mem=64 * 4)
    np.testing.assert_array_equal(y, np.roll(x, -1))


def test_reverse_schedule_exposes_missing_barrier(errors_module, emu_module):
    errors_module_reverse = emu_module("errors.cu", "reverse")
    x = np.arange(256, dtype=np.float32)
    results = {}
    for name in ("neighbour<false>", "neighbour<true>"):
        for label, mod in (("normal", errors_module), ("reverse", errors_module_reverse)):
            y = np.zeros_like(x)
            mod.get_function(name)(2, 128, (x, y), shared_mem=128 * 4)
            results[name, label] = y
    assert not np.array_equal(results["neighbour<false>", "normal"],
                              results["neighbour<false>", "reverse"])
    expected = np.concatenate([np.roll(x[:128], -1), np.roll(x[128:], -1)])
    np.testing.assert_array_equal(results["neighbour<true>", "normal"], expected)
    np.testing.assert_array_equal(results["neighbour<true>", "reverse"], expected)


@pytest.mark.parametrize("grid, block, shared, match", [
    (1, (64, 32), 0, "more than 1024 threads"),
    (1, (32, 1, 65), 0, "block dimensions exceed"),
    ((1, 70000), 32, 0, "grid dimensions exceed"),
    (1, 32, 64 * 1024, "max_dynamic_shared_size_bytes"),
])
def test_invalid_launch_configuration(errors_module, grid, block, shared, match):
    x = np.zeros(64, np.float32)
    with pytest.raises(EmulationError, match=match):
        errors_module.get_function("neighbour<true>")(grid, block, (x, x), shared_mem=shared)


def test_large_shared_memory_needs_attribute(errors_module):
    kern = errors_module.get_function("neighbour<true>")
    x = np.arange(32, dtype=np.float32)
    y = np.zeros_like(x)
    kern.max_dynamic_shared_size_bytes = 100 * 1024
    kern(1, 32, (x, y), shared_mem=100 * 1024)
    np.testing.assert_array_equal(y, np.roll(x, -1))
    with pytest.raises(ValueError):
        kern.max_dynamic_shared_size_bytes = 300 * 1024


@pytest.mark.parametrize("args, match", [
    ((np.zeros(4, np.float32),), "takes 2 arguments"),
    ((np.zeros(4, np.float32), 1.0), "numpy array or numpy scalar"),
    ((np.zeros(4, np.float32), np.float32(1)), "expects a pointer"),
])
def test_argument_checks(errors_module, args, match):
    with pytest.raises(TypeError, match=match):
        errors_module.get_function("neighbour<true>")(1, 4, args)


def test_scalar_size_mismatch(basic_module):
    x = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match="8-byte value"):
        basic_module.get_function("affine_strided")(1, 4, (x, np.int32(1), x, np.int32(0)))
    with pytest.raises(TypeError, match="grid must be"):
        basic_module.get_function("affine_strided")(1.5, 4, ())
