"""Every kernel family under AddressSanitizer (emulated, one subprocess per family).

The problems use awkward views (negative strides, slices of larger buffers)
and boundary modes whose index math reaches far outside the axis, so an
off-by-one in an offset shows up as a heap-buffer-overflow report.

No fixed timeout (issue 28: one 600 s limit for all families failed on a loaded
machine).  Each family is its own test, in two steps:

1. In this process, the family's body runs against a recording loader: it names
   the kernels and counts the emulated threads of every launch, and runs nothing.
   The family's ASan libraries are then compiled here (``build_module``, no limit:
   compile time is what load stretches most).
2. The child (ASan preloaded) runs the body for real and checks every result; it
   must compile nothing (it says how many it did), and its limit is derived from
   the work counted in step 1: :data:`CHILD_START_S` plus :data:`PER_THREAD_S` per
   emulated thread, times the load per core (``limits.load_factor``).

Measured on the shared 2-core VM at load average 5 (2026-12-01, the libraries
built): the child starts in 2.7-4.1 s and costs 0.2 ms (direct, vol2col) to 10 ms
(tensor-core tiles, whose threads each run a 128x128 tile's MMAs) per emulated
thread; the five children took 4-44 s against limits of 171-786 s (at least 7x).
The whole file took 221 s with every ASan library compiled from scratch.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

import limits
from emulation_support import asan_available

pytestmark = pytest.mark.skipif(not asan_available(), reason="ASan emulation unavailable")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SOURCES = ROOT / "cuda_src"

#: Seconds the child may take to start (Python and NumPy under ASan, loading the
#: libraries): 30x the 4 s measured under load.
CHILD_START_S = 120.0
#: Seconds per emulated CUDA thread launched: 5x the costliest thread measured under load
#: (a tensor-core tile's, 10 ms), 250x a direct-kernel thread's.
PER_THREAD_S = 0.05

_PRELUDE = textwrap.dedent("""
    import numpy as np
    from cupyconv._kernels import launch
    from kernel_reference import (make_problem, make_view, ref_col2vol, ref_conv, ref_vol2col,
                                  small_ints, to_logical, to_physical)
    rng = np.random.default_rng(0)

    def awkward(c, mode, dtype, contiguous=False):
        # the awkward problem with C_in = c, channels-last; its operands as flipped and
        # strided views, or contiguous (exactly their size: a copy past a row overflows)
        p = make_problem(c=c, mode=mode, layout="channels_last", dtype=dtype, flip=True,
                         **AWKWARD)
        xl = small_ints(rng, (2, c, 5, 4, 3), dtype)
        wl = small_ints(rng, (6, c // 2, 3, 2, 2), dtype)
        if contiguous:
            x, w = (np.ascontiguousarray(to_physical(a, "channels_last")) for a in (xl, wl))
        else:
            x = make_view(to_physical(xl, "channels_last"), "flipped")
            w = make_view(to_physical(wl, "channels_last"), "strided")
        return p, xl, wl, x, w

    def implicit_gemm_tiles(operands, tiles, **flags):
        p, xl, wl, x, w = operands
        for tile in tiles:
            y = to_physical(np.zeros((2, 6) + p.out_shape, p.dtype), "channels_last")
            launch.run_implicit_gemm_fprop(load, p, x, w, y, tile=tile, **flags)
            check(tile, to_logical(y, "channels_last"), ref_conv(p, xl, wl))
""")

#: The awkward problem of every family: groups, stride, dilation, pads past the axis.
_AWKWARD = dict(n=2, k=6, g=2, s=(5, 4, 3), ks=(3, 2, 2), stride=(2, 1, 2), dilation=(1, 2, 1),
                padding=((4, 1), (0, 3), (1, 1)))

#: family -> body; ``load`` is the loader, ``check(what, got, ref)`` compares exactly.
FAMILIES = {
    "vol2col_col2vol": """
        p, xl, _, x, _ = awkward(4, "reflect", np.float64)
        col = np.zeros((p.in_channels * p.taps, p.gemm_m), np.float64)
        launch.run_vol2col(load, p, x, col)
        check("vol2col", col, ref_vol2col(p, xl))
        dx = make_view(to_physical(np.zeros_like(xl), "channels_last"), "strided")
        launch.run_col2vol(load, p, col, dx)
        check("col2vol", to_logical(dx, "channels_last"), ref_col2vol(p, col))
    """,
    "implicit_gemm_and_direct": """
        p, xl, wl, x, w = awkward(4, "reflect", np.float64)
        bias = np.arange(12, dtype=np.float64)[::2]
        for run in (launch.run_implicit_gemm_fprop, launch.run_direct):
            y = make_view(to_physical(np.zeros((2, 6) + p.out_shape), "channels_last"),
                          "flipped")
            run(load, p, x, w, y, bias=bias)
            check(run.__name__, to_logical(y, "channels_last"), ref_conv(p, xl, wl, bias))
    """,
    "implicit_gemm_tap_aligned_and_dmma": """
        # C/G = 8: taps outer, channel slices inner; then the float64 tensor-core tile
        implicit_gemm_tiles(awkward(16, "symmetric", np.float64),
                            [(64, 64, 8, 1), (64, 64, 8, 2)])
    """,
    "tensor_core_tf32_f16": """
        # the TF32 and float16 tensor-core tiles (C/G = 16; f16 through ldmatrix)
        implicit_gemm_tiles(awkward(32, "reflect", np.float32),
                            [(128, 128, 8, 2), (64, 64, 8, 2)])
        implicit_gemm_tiles(awkward(32, "reflect", np.float16),
                            [(128, 128, 16, 2), (64, 64, 16, 2)])
    """,
    "fma_dmma_tiles": """
        # the multistage tiles (issue 26): float32 FMA 128x128x16 and float64 DMMA 128x64x16
        # (128 threads), three cp.async stages in dynamic shared memory (72 KiB opted in)
        implicit_gemm_tiles(awkward(32, "reflect", np.float32), [(128, 128, 16, 5)])
        implicit_gemm_tiles(awkward(32, "reflect", np.float64), [(128, 64, 16, 6), (128, 64, 16, 7)])
        # their channels-last twins (16-byte copies) on arrays of exactly their size
        implicit_gemm_tiles(awkward(32, "reflect", np.float64, contiguous=True),
                            [(128, 64, 16, 9), (128, 64, 16, 10)])
    """,
    "wgmma_tiles": """
        # the sm_90a warpgroup-MMA tiles (issue 27): contiguous channels-last operands exactly
        # their size, one K-tile per group, 6 of the 64 columns, rows past M zero-filled
        from cupyconv._kernels import wgmma_launch
        for dtype, c in ((np.float16, 128), (np.float32, 64)):
            p, xl, wl, x, w = awkward(c, "reflect", dtype, contiguous=True)
            tile = (128, 64, c // 2, 8)
            y = to_physical(np.zeros((2, 6) + p.out_shape, p.dtype), "channels_last")
            wgmma_launch.run_wgmma(load, p, x, w, y, tile=tile, tf32=dtype == np.float32)
            check(tile, to_logical(y, "channels_last"), ref_conv(p, xl, wl))
    """,
    "tensor_core_channels_last_copies": """
        # variant 3: 16-byte copies of contiguous channels, on arrays of exactly their size
        implicit_gemm_tiles(awkward(32, "reflect", np.float64, contiguous=True),
                            [(64, 64, 8, 3)])
        implicit_gemm_tiles(awkward(32, "reflect", np.float32, contiguous=True),
                            [(128, 128, 8, 3), (64, 64, 8, 3)])
        implicit_gemm_tiles(awkward(32, "reflect", np.float16, contiguous=True),
                            [(128, 128, 16, 3), (64, 64, 16, 3)])
    """,
    "multistage_tf32_f16_bf16": """
        # variant 4: K-tiles of 128 bytes in swizzled dynamic shared memory (past 48 KiB),
        # C/G = 64, on arrays of exactly their size (TF32 on small integers: rounded already);
        # each 16-bit tile once: float16 and bfloat16 make the same accesses (2-byte
        # elements, one loop), so bfloat16 takes the 64x64 tile where ml_dtypes is there
        from cupyconv._dtypes import BFLOAT16
        implicit_gemm_tiles(awkward(128, "reflect", np.float32, contiguous=True),
                            [(128, 128, 32, 4), (64, 64, 32, 4)], tf32=True)
        implicit_gemm_tiles(awkward(128, "reflect", np.float16, contiguous=True),
                            [(128, 128, 64, 4)])
        small = np.float16 if BFLOAT16 is None else BFLOAT16
        implicit_gemm_tiles(awkward(128, "reflect", small, contiguous=True), [(64, 64, 64, 4)])
    """,
    "relayout": """
        # the re-layout kernel (issue 26 item 1): a flipped, strided view into an output of
        # exactly its size (a tile write past the last channel or position overflows),
        # TF32 rounding fused for float32; 64-bit indices too
        from cupyconv._kernels import program, relayout_launch
        from cupyconv._kernels.params import logical_strides
        from cupyconv.backends.arrays import to_tf32
        from cupyconv._dtypes import BFLOAT16
        cases = [(np.float32, True, False), (np.float16, False, True)]
        if BFLOAT16 is not None:
            cases.append((BFLOAT16, False, False))
        for dtype, rounding, wide in cases:
            a = make_view(small_ints(rng, (3, 35, 5, 4, 3), dtype), "flipped")
            prog = relayout_launch.relayout_program(
                load, dtype, 3, 35, (5, 4, 3), logical_strides(a, "channels_first", 3),
                rounding, wide)
            got = program.execute(prog, np, {"a": a})["r"]
            ref = np.ascontiguousarray(np.moveaxis(a, 1, -1))
            check("relayout", got, to_tf32(ref) if rounding else ref)
        # the split-K weight gradient's reduction (issue 26 item 2; in this child, not one
        # of its own: 14 s a child): partials exactly their size, rank 3's instance
        from cupyconv._kernels import splitk_launch
        for dtype in (np.float32, np.float64):
            parts = small_ints(rng, (3, 4, 37), dtype)
            y = np.zeros((3, 37), dtype)
            step = splitk_launch.reduce_step(load, dtype, 3, 4, 37, ("p", "y"), rank=3)
            program.execute(program.Program("reduce", ("p", "y"), (), (step,), "y"), np,
                            {"p": parts, "y": y})
            check(np.dtype(dtype).name, y, parts.sum(axis=1))
    """,
}

_CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, {here!r})
    from cupyconv._emulation import EmulatedModule, build_stats

    def load(source, names):
        return EmulatedModule(path={root!r} + "/" + source.removeprefix("cuda_src/"),
                              name_expressions=list(names), mode="asan")

    def check(what, got, ref):
        assert np.array_equal(got, ref), what

    AWKWARD = {awkward!r}
""")


class _Recorder:
    """A loader (a callable, as ``launch`` expects) whose kernels run nothing: it records
    each module asked for and counts the threads of every launch."""

    def __init__(self):
        self.modules, self.threads = [], 0

    def __call__(self, source, names):
        if (source, tuple(names)) not in self.modules:
            self.modules.append((source, tuple(names)))
        return self._Module(self)

    class _Module:
        def __init__(self, recorder):
            self.recorder = recorder

        def get_function(self, name):
            def run(grid, block, args, shared_mem=0):
                count = [int(np.prod(d if isinstance(d, tuple) else (d,))) for d in (grid, block)]
                self.recorder.threads += count[0] * count[1]
            return run


def _body(family):
    return _PRELUDE + textwrap.dedent(FAMILIES[family])


def record(family):
    """``(modules, emulated threads)`` the family's body launches (nothing runs)."""
    import sys
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    recorder = _Recorder()
    exec(compile(_body(family), f"<asan family {family}>", "exec"),
         {"load": recorder, "check": lambda *a: None, "AWKWARD": _AWKWARD})
    return recorder.modules, recorder.threads


def child_limit(threads):
    """Seconds the ASan child may run: derived from the work it launches."""
    return (CHILD_START_S + PER_THREAD_S * threads) * limits.load_factor()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_kernel_family_under_asan(family):
    from cupyconv._emulation import build_module
    from emulation_support import run_in_asan_subprocess
    modules, threads = record(family)
    assert modules and threads, "the family launched nothing"
    for source, names in modules:                    # compiled here, without a time limit
        build_module(path=f"{SOURCES}/{source.removeprefix('cuda_src/')}",
                     name_expressions=list(names), mode="asan")
    code = (_CHILD.format(here=str(HERE), root=str(SOURCES), awkward=_AWKWARD) + _body(family)
            + '\nprint("ASAN-COMPILES", build_stats()["compiles"])\nprint("ASAN-KERNELS-OK")\n')
    proc = run_in_asan_subprocess(code, timeout=child_limit(threads), cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "ASAN-KERNELS-OK" in proc.stdout
    assert "ASAN-COMPILES 0" in proc.stdout, proc.stdout       # the limit covers launches only
    assert "AddressSanitizer" not in proc.stderr


def test_families_cover_every_kernel_family():
    """Every family of the kernel registry's forward and column kernels is exercised."""
    from cupyconv._kernels import registry
    launched = {Path(source).stem for family in FAMILIES for source, _ in record(family)[0]}
    expected = {Path(registry.FAMILIES[f].source).stem
                for f in ("vol2col", "col2vol", "implicit_gemm_fprop", "implicit_gemm_fma_dmma",
                          "implicit_gemm_wgmma", "direct_conv", "relayout_channels_last",
                          "splitk_reduce")}
    assert expected <= launched, expected - launched
