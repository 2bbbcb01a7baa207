"""The split-K reduction kernel (``cuda_src/conv/splitk_reduce.cu``, issue 26), emulated:
its order of summation against NumPy's, bit for bit, and its schedule independence.

Its use, the split-K weight gradient, is tested in
``tests/backends/cuda/test_splitk_wgrad.py``; its ASan run in ``test_kernels_asan.py``.
"""
from __future__ import annotations

import numpy as np
import pytest

from cupyconv._kernels import program, registry, splitk_launch
from kernel_reference import emu_loader


def _reduced(mode, dtype, outer, parts, inner, rng):
    p = rng.standard_normal((outer, parts, inner)).astype(dtype)
    y = np.full((outer, inner), np.nan, dtype)
    step = splitk_launch.reduce_step(emu_loader(mode), dtype, outer, parts, inner, ("p", "y"))
    program.execute(program.Program("reduce", ("p", "y"), (), (step,), "y"), np,
                    {"p": p, "y": y})
    return p, y


@pytest.mark.parametrize("dtype", sorted(registry.SPLITK_DTYPES, key=str))
def test_the_reduction_sums_in_part_order_under_any_schedule(dtype):
    """The kernel alone: part 0 first, one addition per part in the dtype (NumPy's
    left-to-right sum, bit for bit), the same bits when threads and blocks run in
    reverse; an odd total (a partial last block)."""
    rng = np.random.default_rng(1)
    p, normal = _reduced("normal", dtype, 3, 5, 301, rng)
    ref = p[:, 0].copy()
    for s in range(1, 5):
        ref += p[:, s]
    np.testing.assert_array_equal(normal, ref)
    _, reverse = _reduced("reverse", dtype, 3, 5, 301, np.random.default_rng(1))
    np.testing.assert_array_equal(reverse, normal)


def test_nothing_to_sum_is_no_launch_and_bad_arguments_are_refused():
    assert splitk_launch.reduce_step(emu_loader(), np.float32, 0, 2, 5, ("p", "y")) is None
    with pytest.raises(ValueError, match="takes"):
        splitk_launch.reduce_step(emu_loader(), np.float16, 1, 2, 5, ("p", "y"))
    with pytest.raises(ValueError, match="at least 1"):
        splitk_launch.reduce_step(emu_loader(), np.float32, 1, 0, 5, ("p", "y"))
