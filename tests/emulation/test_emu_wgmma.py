"""Warpgroup MMA (cuda_src/common/wgmma.cuh) under the emulator (cuda_src/emu/emu_wgmma.cuh),
kernels in tests/emulation/kernels/wgmma.cu, layouts built by tests/emulation/wgmma_layouts.py.

Every product is checked against NumPy through the fragment layout; the register maps
against the PTX ISA formulas and CUTLASS's CLayout_64xN; the planted bugs (a wrong swizzle,
a missing fence, a missing or early wait, two accumulator registers swapped, an overwrite
before the wait) must fail.  How the hardware orders the K-sum of a wgmma is not documented,
so non-integer results are compared within a float32 accumulation bound
(wgmma_layouts.tolerance); integer-valued inputs, whose sums are exact, are compared exactly.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import wgmma_layouts as wl
from cupyconv._emulation import EmulatedModule, EmulationError
from emulation_support import cached_module

SOURCE = Path(__file__).parent / "kernels" / "wgmma.cu"
SS = [("f16", 16, 0, 0), ("f16", 16, 1, 0), ("f16", 16, 0, 1), ("f16", 16, 1, 1),
      ("bf16", 16, 0, 0), ("bf16", 16, 1, 1), ("tf32", 16, 0, 0), ("f16", 8, 0, 0),
      ("f16", 64, 0, 0)]
RS = [("f16", 16, 0), ("f16", 16, 1), ("bf16", 16, 0), ("tf32", 16, 0)]
#: Name expressions of kernels/wgmma.cu (also compiled by tests/toolchain/test_wgmma_nvrtc.py).
NAMES = ([f"wg_ss<{wl.TYPES[k][0]}, {n}, {ta}, {tb}>" for k, n, ta, tb in SS]
         + [f"wg_rs<{wl.TYPES[k][0]}, {n}, {tb}>" for k, n, tb in RS]
         + ["wg_fragment_maps", "wg_pipeline<16>"])
def _module(mode: str = "normal") -> EmulatedModule:
    return cached_module(SOURCE, NAMES, mode)


@pytest.fixture(scope="module", params=["normal", "reverse"])
def wg_module(request):
    return _module(request.param)


def _run_ss(mod, kind, n, ta, tb, case, a_bits, b_bits, c, *, scale_d=1, bug="none",
            swizzle_a=None, threads=128):
    img = wl.image([(case["a"], a_bits), (case["b"], b_bits)], case["nbytes"])
    meta = wl.meta(case["a"], case["b"], case["steps"], scale_d, bug, img.size, swizzle_a)
    out = np.zeros((64, n), np.float32)
    mod.get_function(f"wg_ss<{wl.TYPES[kind][0]}, {n}, {ta}, {tb}>")(
        (1,), (threads,), (img, meta, c, out), shared_mem=img.size + 1024)
    return out


def _reference(a, b, c, scale_d=1):
    return a @ b.T + (c.astype(np.float64) if scale_d else 0.0)


def _close(out, a, b, c, steps, scale_d=1):
    ref = _reference(a, b, c, scale_d)
    return bool(np.all(np.abs(out - ref) <= wl.tolerance(a, b, c if scale_d else 0 * c, steps)))


# -- register maps -------------------------------------------------------------------------

def test_fragment_maps_are_the_isa_ones():
    out = np.zeros((128, 20, 2), np.int32)
    _module().get_function("wg_fragment_maps")((1,), (128,), (out,))
    for x in range(128):
        for i in range(8):
            assert tuple(out[x, i]) == wl.fragment_d(x, i) == wl.cutlass_clayout(x, i)
            assert tuple(out[x, 8 + i]) == wl.fragment_a(x, i, "f16")
        for i in range(4):
            assert tuple(out[x, 16 + i]) == wl.fragment_a(x, i, "tf32")
    d = {wl.fragment_d(x, i) for x in range(128) for i in range(8)}
    assert d == {(r, col) for r in range(64) for col in range(16)}      # a bijection onto 64 x 16


# -- products through every layout ---------------------------------------------------------

LAYOUTS = [  # (kind, n, trans_a, trans_b, swizzle A, swizzle B, K steps)
    ("f16", 16, 0, 0, "128B", "128B", 4), ("f16", 16, 0, 0, "64B", "64B", 2),
    ("f16", 16, 0, 0, "32B", "32B", 1), ("f16", 16, 0, 0, "none", "none", 2),
    ("f16", 16, 0, 0, "none", "128B", 2), ("f16", 16, 1, 0, "128B", "64B", 2),
    ("f16", 16, 1, 0, "none", "none", 2), ("f16", 16, 0, 1, "32B", "128B", 1),
    ("f16", 16, 1, 1, "64B", "32B", 2), ("f16", 16, 1, 1, "128B", "none", 2),
    ("bf16", 16, 0, 0, "128B", "32B", 1), ("bf16", 16, 1, 1, "128B", "128B", 2),
    ("tf32", 16, 0, 0, "128B", "128B", 4), ("tf32", 16, 0, 0, "none", "64B", 2),
    ("tf32", 16, 0, 0, "32B", "none", 1), ("f16", 8, 0, 0, "128B", "none", 2),
    ("f16", 64, 0, 0, "128B", "128B", 3),
]


@pytest.mark.parametrize("kind, n, ta, tb, sa, sb, steps", LAYOUTS,
                         ids=["-".join(map(str, c)) for c in LAYOUTS])
def test_ss_product_through_the_layout(wg_module, kind, n, ta, tb, sa, sb, steps):
    rng = np.random.default_rng(hash((kind, n, ta, tb, sa, sb)) % 2**32)
    case = wl.layout_case(kind, n, sa, sb, bool(ta), bool(tb), steps)
    for integers in (True, False):
        a_bits, a, b_bits, b, c = wl.results(kind, n, steps, rng, integers)
        out = _run_ss(wg_module, kind, n, ta, tb, case, a_bits, b_bits, c)
        if integers:        # exact sums: the layouts alone decide
            np.testing.assert_array_equal(out, _reference(a, b, c))
        else:
            assert _close(out, a, b, c, steps)


@given(seed=st.integers(0, 2**32 - 1), scale_d=st.sampled_from([0, 1]),
       layout=st.sampled_from([("f16", "128B", "64B"), ("bf16", "64B", "128B"),
                               ("tf32", "128B", "32B")]))
def test_ss_random_values_and_scale_d(seed, scale_d, layout):
    kind, sa, sb = layout
    rng = np.random.default_rng(seed)
    case = wl.layout_case(kind, 16, sa, sb, False, False, 1)
    a_bits, a, b_bits, b, c = wl.results(kind, 16, 1, rng)
    c[0, 0] = np.nan if scale_d == 0 else c[0, 0]   # scale_d = 0 does not read the accumulators
    out = _run_ss(_module(), kind, 16, 0, 0, case, a_bits, b_bits, c, scale_d=scale_d)
    assert _close(out, a, b, np.nan_to_num(c), 1, scale_d)


@pytest.mark.parametrize("kind, n, tb", RS, ids=[f"{k}-{n}-{t}" for k, n, t in RS])
def test_rs_product(wg_module, kind, n, tb):
    rng = np.random.default_rng(7)
    steps = 2
    case = wl.layout_case(kind, n, "128B", "64B" if not tb else "128B", False, bool(tb), steps)
    a_bits, a, b_bits, b, c = wl.results(kind, n, steps, rng, integers=True)
    img = wl.image([(case["b"], b_bits)], case["nbytes"])
    meta = wl.meta(None, case["b"], steps, 1, "none", img.size)
    regs = wl.rs_registers(a_bits, kind, steps)
    out = np.zeros((64, n), np.float32)
    wg_module.get_function(f"wg_rs<{wl.TYPES[kind][0]}, {n}, {tb}>")(
        (1,), (128,), (regs, img, meta, c, out), shared_mem=img.size + 1024)
    np.testing.assert_array_equal(out, _reference(a, b, c))


def test_swizzle_pattern_off_its_boundary_needs_the_base_offset():
    rng = np.random.default_rng(3)
    a_bits, a, b_bits, b, c = wl.results("f16", 16, 1, rng, integers=True)
    case = wl.layout_case("f16", 16, "128B", "128B", False, False, 1, a_at=1024 + 384,
                          base_offset=3)
    np.testing.assert_array_equal(_run_ss(_module(), "f16", 16, 0, 0, case, a_bits, b_bits, c),
                                  _reference(a, b, c))
    case["a"].base_offset = 0
    with pytest.raises(EmulationError, match="starts in row 3 of its 1024-byte swizzle pattern"):
        _run_ss(_module(), "f16", 16, 0, 0, case, a_bits, b_bits, c)


# -- planted bugs --------------------------------------------------------------------------

def _bug_case(kind="f16"):
    rng = np.random.default_rng(11)
    case = wl.layout_case(kind, 16, "128B", "128B", False, False, 2)
    return case, wl.results(kind, 16, 2, rng)


@pytest.mark.parametrize("bug", ["wrong_swizzle", "swap_regs", "early_read"])
def test_planted_bug_gives_wrong_numbers(wg_module, bug):
    case, (a_bits, a, b_bits, b, c) = _bug_case()
    assert _close(_run_ss(wg_module, "f16", 16, 0, 0, case, a_bits, b_bits, c), a, b, c, 2)
    kwargs = {"swizzle_a": wl.SWIZZLES["64B"][0]} if bug == "wrong_swizzle" else {"bug": bug}
    out = _run_ss(wg_module, "f16", 16, 0, 0, case, a_bits, b_bits, c, **kwargs)
    assert not _close(out, a, b, c, 2)
    if bug == "early_read":          # what a read before the wait sees: the poison NaN
        assert np.isnan(out).all()


def test_wait_group_1_leaves_the_newest_group_in_flight(wg_module):
    """One group per K step: wait_group<1> completes all but the last, whose accumulators
    (the same registers) still read as in flight; the final wait_group<0> completes it."""
    case, (a_bits, a, b_bits, b, c) = _bug_case()
    out = _run_ss(wg_module, "f16", 16, 0, 0, case, a_bits, b_bits, c, bug="group_per_step")
    assert np.isnan(out).all()


def test_cp_async_staging_waited_then_fenced(wg_module):
    case, (a_bits, a, b_bits, b, c) = _bug_case()
    assert _close(_run_ss(wg_module, "f16", 16, 0, 0, case, a_bits, b_bits, c, bug="cp_async"),
                  a, b, c, 2)


ERRORS = [("no_proxy_fence", "no fence.proxy.async ran in this block"),
          ("cp_async_late", "written by the generic proxy \\(a store or a landed cp.async\\) after "
                            "the last fence.proxy.async"),
          ("overwrite", "changed between its issue and the wgmma.wait_group"),
          ("no_wgmma_fence", "without a wgmma.fence"),
          ("no_wait", "operation\\(s\\) in flight")]


@pytest.mark.parametrize("bug, message", ERRORS, ids=[e[0] for e in ERRORS])
def test_planted_bug_is_an_emulation_error(wg_module, bug, message):
    case, (a_bits, a, b_bits, b, c) = _bug_case()
    with pytest.raises(EmulationError, match=message):
        _run_ss(wg_module, "f16", 16, 0, 0, case, a_bits, b_bits, c, bug=bug)


def test_a_read_outside_shared_memory_is_an_emulation_error():
    case, (a_bits, a, b_bits, b, c) = _bug_case()
    case["b"].sbo = 1 << 16          # the second 8-row group of B lies past the allocation
    with pytest.raises(EmulationError, match=r"element \(8, 0\) of B is at shared address \d+, "
                                             r"outside the block's shared memory"):
        _run_ss(_module(), "f16", 16, 0, 0, case, a_bits, b_bits, c)


def test_a_partial_warpgroup_is_an_emulation_error():
    case, (a_bits, a, b_bits, b, c) = _bug_case()
    with pytest.raises(EmulationError, match="collective of 128 threads"):
        _run_ss(_module(), "f16", 16, 0, 0, case, a_bits, b_bits, c, threads=96)


# -- the mbarrier pipeline -----------------------------------------------------------------

def _pipeline(mod, bug=0, steps=3):
    rng = np.random.default_rng(5)
    case = wl.layout_case("f16", 16, "128B", "128B", False, False, 1)
    stages, want = [], np.zeros((64, 16))
    for _ in range(steps):
        a_bits, a, b_bits, b, _ = wl.results("f16", 16, 1, rng, integers=True)
        stages.append(wl.image([(case["a"], a_bits), (case["b"], b_bits)], case["nbytes"]))
        want += a @ b.T
    img = np.concatenate(stages)
    meta = wl.meta(case["a"], case["b"], steps, 1, "none", stages[0].size)
    meta[14] = bug
    out = np.zeros((64, 16), np.float32)
    mod.get_function("wg_pipeline<16>")((1,), (256,), (img, meta, out),
                                        shared_mem=stages[0].size + 1024)
    return out, want


def test_pipeline_producer_consumer(wg_module):
    out, want = _pipeline(wg_module)
    np.testing.assert_array_equal(out, want)


def test_pipeline_without_the_empty_wait_fails(wg_module):
    try:
        out, want = _pipeline(wg_module, bug=1)
    except EmulationError as exc:  # a stage overwritten in flight, or an arrival on a busy phase
        assert "wgmma" in str(exc) or "mbarrier.arrive on a phase with no arrival left" in str(exc)
    else:
        assert not np.array_equal(out, want)


def test_pipeline_whose_barrier_never_completes_is_a_deadlock():
    with pytest.raises(EmulationError, match="polls an mbarrier .* whose phase never completes"):
        _pipeline(_module(), bug=2)


ASAN_NAMES = ["wg_ss<1, 64, 0, 0>", "wg_rs<3, 16, 0>", "wg_pipeline<16>"]


def test_wgmma_kernels_are_clean_under_asan():
    """Staging, descriptor reads, the accumulator copies and the mbarrier state stay in
    bounds: no ASan/UBSan report, and the products still match."""
    from cupyconv._emulation import build_module
    from emulation_support import require_asan, run_in_asan_subprocess
    require_asan()
    build_module(path=str(SOURCE), name_expressions=ASAN_NAMES, mode="asan")
    code = f"""
import sys
import numpy as np
sys.path[:0] = [{str(Path(__file__).parent)!r}]
import wgmma_layouts as wl
from cupyconv._emulation import EmulatedModule
f = EmulatedModule(path={str(SOURCE)!r}, name_expressions={ASAN_NAMES!r}, mode="asan").get_function
rng = np.random.default_rng(0)
case = wl.layout_case("f16", 64, "128B", "128B", False, False, 3)
a_bits, a, b_bits, b, c = wl.results("f16", 64, 3, rng, integers=True)
img = wl.image([(case["a"], a_bits), (case["b"], b_bits)], case["nbytes"])
out = np.zeros((64, 64), np.float32)
f("wg_ss<1, 64, 0, 0>")((1,), (128,), (img, wl.meta(case["a"], case["b"], 3, 1, "none", img.size), c, out),
                        shared_mem=img.size + 1024)
assert np.array_equal(out, a @ b.T + c)
case = wl.layout_case("tf32", 16, "128B", "64B", False, False, 2)
a_bits, a, b_bits, b, c = wl.results("tf32", 16, 2, rng, integers=True)
img = wl.image([(case["b"], b_bits)], case["nbytes"])
out = np.zeros((64, 16), np.float32)
f("wg_rs<3, 16, 0>")((1,), (128,), (wl.rs_registers(a_bits, "tf32", 2), img,
                     wl.meta(None, case["b"], 2, 1, "none", img.size), c, out), shared_mem=img.size + 1024)
assert np.array_equal(out, a @ b.T + c)
case = wl.layout_case("f16", 16, "128B", "128B", False, False, 1)
a_bits, a, b_bits, b, _ = wl.results("f16", 16, 1, rng, integers=True)
img = wl.image([(case["a"], a_bits), (case["b"], b_bits)], case["nbytes"])
out = np.zeros((64, 16), np.float32)
f("wg_pipeline<16>")((1,), (256,), (np.concatenate([img, img]), wl.meta(case["a"], case["b"], 2, 1, "none", img.size), out),
                     shared_mem=img.size + 1024)
assert np.array_equal(out, 2 * (a @ b.T))
print("CHILD-OK", flush=True)
"""
    proc = run_in_asan_subprocess(code)
    assert proc.returncode == 0 and "CHILD-OK" in proc.stdout, proc.stderr[-3000:]
