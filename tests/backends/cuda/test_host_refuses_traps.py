"""Every condition a device-side ``cc::require`` guards (``grep -rn "require(" cuda_src``) is
refused on the host before a launch, so no public call reaches a trap (a sticky error that
kills the CUDA context on a GPU).  One test per condition: the launcher's refusal of an
explicit tile that breaks it, and, for the conditions on the device's arch, that the
automatic choice never takes such a tile (hypothesis over bounded problems)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cupyconv._kernels import launch, registry, wgmma_launch, winograd_launch
from cupyconv.backends.cuda import EmulatedRunner, relayout
from cupyconv.core.problem import ConvProblem


def _problem(c, k, dtype, size=8, groups=1, precision="highest", ksize=3):
    return ConvProblem.create(x_shape=(2, c, size, size), w_shape=(k, c // groups, ksize, ksize),
                              stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1),
                              groups=groups, padding_mode="constant", cval=0,
                              layout="channels_first", dtype=np.dtype(dtype),
                              precision=precision)


def _arrays(problem, channels_last=False):
    x, w = (np.zeros(s, problem.dtype) for s in (problem.x_shape, problem.w_shape))
    if channels_last:
        x, w = (np.moveaxis(np.ascontiguousarray(np.moveaxis(a, 1, -1)), -1, 1) for a in (x, w))
    return x, w


def _refused(problem, tile, channels_last=False, tf32=False):
    x, w = _arrays(problem, channels_last)
    with pytest.raises(ValueError) as info:
        launch.implicit_gemm_program(lambda *a: None, problem, x, w, tile=tile, tf32=tf32)
    return str(info.value)


def test_tap_aligned_tile_needs_whole_k_tiles():
    """implicit_gemm_fprop.cu: ``cpg % BK == 0`` for the tap-aligned variants."""
    assert "multiple of 8" in _refused(_problem(12, 8, np.float32), (128, 64, 8, 1))


def test_multistage_fma_dmma_tile_needs_whole_k_tiles():
    """implicit_gemm_fma_dmma.cu: ``C/G % 16 == 0``."""
    assert "multiple of 16" in _refused(_problem(8, 8, np.float64), (128, 64, 16, 6))


def test_channels_last_dmma_tile_needs_channel_contiguous_aligned_operands():
    """implicit_gemm_fma_dmma.cu: unit channel strides, 16-byte aligned x and w."""
    why = _refused(_problem(16, 8, np.float64), (128, 64, 16, 9))
    assert "channel strides must be 1" in why


def test_multistage_tile_needs_whole_k_tiles_and_rounded_tf32():
    """implicit_gemm_multistage.cu (the K-tile of 128 bytes; its loop never rounds)."""
    assert "multiple of 64" in _refused(_problem(16, 8, np.float16), (128, 128, 64, 4), True)
    assert "TF32" in _refused(_problem(32, 8, np.float32), (128, 128, 32, 4), True)


def test_wgmma_tile_needs_a_9_0_device():
    """implicit_gemm_wgmma.cu: sm_90a only: no tile elsewhere, and the CUDA path's
    selection takes no wgmma tile on a compute capability 8.0 device."""
    problem = _problem(64, 64, np.float16)
    assert wgmma_launch.wgmma_tile(problem, False, 80) is None
    assert wgmma_launch.wgmma_tile(problem, False, 90) is not None

    class Runner(EmulatedRunner):
        static = property(lambda self: dataclasses.replace(EmulatedRunner.NOMINAL, arch=80))
    x, w = _arrays(problem, True)
    assert relayout.wgmma_tile(problem, x, w, Runner().static, False) is None


def test_winograd_piece_needs_m_within_alpha():
    """winograd_transform.cu ``require_piece``: 1 <= m <= alpha <= MAX_ALPHA, a tile per
    block."""
    problem = _problem(4, 4, np.float32)
    axis = winograd_launch.PieceAxis(m=4, alpha=3, count=8, in_start=0, in_step=1, padded=10,
                                     out_start=0, out_step=1)
    ok, why = winograd_launch.can_implement_winograd(problem, [(axis, axis)])
    assert not ok and "m <= alpha" in why
    big = dataclasses.replace(axis, m=2, alpha=registry.WINOGRAD_MAX_ALPHA + 1)
    ok, why = winograd_launch.can_implement_winograd(problem, [(big, big)])
    assert not ok and "alpha" in why


DTYPES = st.sampled_from(["float32", "float64", "float16"])


@given(c=st.integers(1, 80), k=st.integers(1, 160), dtype=DTYPES, size=st.integers(1, 64),
       tf32=st.booleans(), arch=st.sampled_from([75, 80, 86, 90]))
def test_automatic_tile_never_breaks_a_device_condition(c, k, dtype, size, tf32, arch):
    """The automatic tile: the tensor-core variants (sm_80 atoms: implicit_gemm_fprop.cu,
    implicit_gemm_multistage.cu, the DMMA tiles) only with ``mma`` (compute capability 8.0
    or newer); never the sm_90 float64 atom (variants 7, 10: implicit_gemm_fma_dmma.cu),
    which only an explicit tile takes; never a tap-aligned tile without whole K-tiles."""
    tf32 = tf32 and dtype == "float32"
    problem = _problem(c, k, dtype, size, precision="tf32" if tf32 else "highest")
    tile = launch.implicit_gemm_tile(problem, mma=arch >= 80, tf32=tf32)
    assert tile[3] not in (7, 10)
    assert registry.gemm_tile_fits(tile, c)
    if arch < 80:
        assert not registry.tensor_core_variant(tile[3])


@given(rank=st.integers(1, 3), size=st.integers(1, 40), ksize=st.integers(1, 9),
       stride=st.integers(1, 4), dilation=st.integers(1, 3))
def test_direct_row_pitch_covers_a_row(rank, size, ksize, stride, dilation):
    """direct_conv.cu: the row pitch (``params.aux[2]``) is at least the input tile's row."""
    problem = ConvProblem.create(
        x_shape=(1, 1) + (size + ksize * dilation,) * rank, w_shape=(1, 1) + (ksize,) * rank,
        stride=(stride,) * rank, padding=((0, 0),) * rank, dilation=(dilation,) * rank,
        groups=1, padding_mode="constant", cval=0, layout="channels_first",
        dtype=np.dtype(np.float32))
    found = launch.direct_tile(problem)
    if found is None:
        return
    (th, tw), (kch, kcw) = found
    pitch, _ = launch.direct_smem_layout(problem, (th, tw), kch, kcw)
    assert pitch >= (tw - 1) * stride + dilation * (kcw - 1) + 1


def test_dynamic_shared_size_is_the_tiles():
    """implicit_gemm_fma_dmma.cu: launched with the tile's dynamic shared size
    (``params.aux[1] == kSmemBytes``)."""
    problem = _problem(16, 8, np.float64)
    x, w = _arrays(problem)
    prog = launch.implicit_gemm_program(lambda s, n: _Module(), problem, x, w, tile=(128, 64, 16, 6))
    for step in prog.steps:
        assert int(step.params["aux"][1]) == step.shared_mem == registry.gemm_dynamic_smem(
            (128, 64, 16, 6), np.float64) > 48 * 1024


class _Module:
    def get_function(self, name):
        return type("Kernel", (), {})()
