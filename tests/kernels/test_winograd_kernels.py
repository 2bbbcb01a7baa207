"""The Winograd transform kernels (cuda_src/conv/winograd_transform.cu) under the emulator:
a reverse thread/block schedule, AddressSanitizer (in a subprocess), 64-bit indexing and
the launchers' refusals.

The problems use awkward views (negative strides, slices of larger buffers) and boundary
modes whose remap reaches far outside the axis; several blocks of tiles per launch, a
partial last block, and stride phases that add (``accumulate``).
"""
from __future__ import annotations

import os
import textwrap

import numpy as np
import pytest

from cupyconv._emulation import emulation_available
from cupyconv._kernels import registry, winograd_launch as wl
from cupyconv.backends.cuda import EmulatedRunner
from cupyconv.backends.cuda import winograd as cuda_winograd

from emulation_support import asan_available
from limits import child_limit
from kernel_reference import emu_loader, make_problem, ref_conv, small_ints

pytestmark = pytest.mark.skipif(not emulation_available(), reason="CUDA emulation unavailable")


class _Runner(EmulatedRunner):
    """An emulated runner whose kernels come from ``emu_loader(mode)`` (reverse, asan)."""

    def __init__(self, mode, **kw):
        super().__init__(**kw)
        self.loader = emu_loader(mode)


def _case(mode="wrap", dtype=np.float64, flip=True):
    """3-D, stride 2 on one axis (two phases that add), dilation 2 on another (two
    residues), groups, a reach past the axis on the first: 150 tiles of 4 x 2 x 6."""
    problem = make_problem(n=2, c=4, k=6, g=2, s=(7, 5, 9), ks=(3, 2, 3), stride=(1, 2, 1),
                           dilation=(2, 1, 1), padding=((4, 1), (0, 3), (1, 1)), mode=mode,
                           dtype=dtype, flip=flip, cval=2 if mode == "constant" else 0)
    rng = np.random.default_rng(5)
    xl = small_ints(rng, problem.x_shape, dtype)
    wl_ = small_ints(rng, problem.w_shape, dtype, scope=2)
    buf = np.zeros((2, 4, 10, 5, 12), dtype)
    buf[:, :, 1:8, :, 3:] = xl[:, :, ::-1]
    x = buf[:, :, 7:0:-1, :, 3:]    # a view of a larger buffer with a negative stride
    assert np.array_equal(x, xl) and x.strides[2] < 0
    return problem, x, wl_


@pytest.mark.parametrize("mode", ["constant", "reflect", "symmetric", "wrap", "edge"])
def test_reverse_schedule_matches_normal(mode):
    """Threads and blocks in reverse order give bitwise-identical results (every shared
    tile is written before a barrier and read after it)."""
    problem, x, w = _case(mode)
    outs = [cuda_winograd.run(problem, x, w, _Runner(m)) for m in ("normal", "reverse")]
    np.testing.assert_array_equal(outs[0], outs[1])
    ref = ref_conv(problem, x, w)
    np.testing.assert_allclose(outs[0], ref, rtol=1e-12, atol=1e-9 * np.abs(ref).max())


def test_forced_64bit_indexing_matches_32bit(monkeypatch):
    problem, x, w = _case("symmetric", np.complex128)
    y32 = cuda_winograd.run(problem, x, w, EmulatedRunner())
    monkeypatch.setattr(wl, "choose_index64", lambda *a, **k: True)
    y64 = cuda_winograd.run(problem, x, w, EmulatedRunner())
    np.testing.assert_array_equal(y32, y64)


def test_launchers_refuse_what_the_kernels_cannot_take():
    problem = make_problem(n=1, c=1, k=1, g=1, s=(12,), ks=(3,), stride=(1,), dilation=(1,),
                           padding=0)
    big = wl.PieceAxis(m=6, alpha=registry.WINOGRAD_MAX_ALPHA + 1, count=10, in_start=0,
                       in_step=1, padded=12, out_start=0, out_step=1)
    ok, why = wl.can_implement_winograd(problem, [(big,)])
    assert not ok and "alpha" in why
    x = np.zeros((1, 1, 12))
    mats = wl.matrix_stack([np.eye(2)], np.float64)
    with pytest.raises(ValueError, match="alpha"):
        wl.run_winograd_input(emu_loader(), problem, (big,), x, mats, np.zeros(10**3))
    fits = wl.PieceAxis(m=2, alpha=4, count=10, in_start=0, in_step=1, padded=12,
                        out_start=0, out_step=1)
    with pytest.raises(ValueError, match="elements"):
        wl.run_winograd_input(emu_loader(), problem, (fits,), x, mats, np.zeros(3))
    assert wl.can_implement_winograd(problem.with_(dtype=np.dtype(np.int64)), [(fits,)])[0] is False
    # one tile of 8^5 float64 does not fit 48 KiB of shared memory
    wide = make_problem(n=1, c=1, k=1, g=1, s=(9,) * 5, ks=(2,) * 5, stride=(1,) * 5,
                        dilation=(1,) * 5, padding=0)
    ok, why = wl.can_implement_winograd(wide, [(wl.PieceAxis(7, 8, 8, 0, 1, 9, 0, 1),) * 5])
    assert not ok and "shared memory" in why


_ASAN_SCRIPT = textwrap.dedent("""
    import sys
    sys.path[:0] = [{here!r}, {tests!r}]
    import numpy as np
    from test_winograd_kernels import _Runner, _case
    from kernel_reference import ref_conv
    from cupyconv.backends.cuda import winograd as cuda_winograd
    from cupyconv.core import ConvProblem

    for mode, dtype in [("reflect", np.float64), ("constant", np.complex64),
                        ("edge", np.float32)]:
        problem, x, w = _case(mode, dtype)
        y = cuda_winograd.run(problem, x, w, _Runner("asan"))
        ref = ref_conv(problem, x, w)
        assert np.allclose(y, ref, rtol=1e-5, atol=1e-4 * np.abs(ref).max()), mode
    # float16: the half input kernel and the float32 sum buffer of the stride phases
    p = ConvProblem.create(x_shape=(1, 2, 9), w_shape=(2, 2, 3), stride=2, padding=1,
                           dtype=np.float16)
    rng = np.random.default_rng(0)
    x = rng.integers(-2, 3, (1, 2, 9)).astype(np.float16)
    w = rng.integers(-2, 3, (2, 2, 3)).astype(np.float16)
    y = cuda_winograd.run(p, x, w, _Runner("asan"))
    assert np.array_equal(y, ref_conv(p, x, w).astype(np.float16)), "float16"
    print("ASAN-WINOGRAD-OK")
""")


@pytest.mark.skipif(not asan_available(), reason="ASan emulation unavailable")
def test_transform_kernels_under_asan():
    from emulation_support import run_in_asan_subprocess
    here = os.path.dirname(os.path.abspath(__file__))
    proc = run_in_asan_subprocess(_ASAN_SCRIPT.format(here=here, tests=os.path.dirname(here)),
                                  # an ASan build of the transform kernels, then small layers
                                  timeout=child_limit(start_s=150),
                                  cwd=os.path.dirname(os.path.dirname(here)))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "ASAN-WINOGRAD-OK" in proc.stdout
    assert "AddressSanitizer" not in proc.stderr
