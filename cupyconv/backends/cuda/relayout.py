"""Channel-contiguous operands for the multistage implicit GEMM (issue 26, item 1).

The multistage tiles (``launch.multistage_tile``, tile variant 4) read x and w as
channels-last memory: every K-tile row is 128 consecutive bytes of channels, one L2
sector fetched per sector used.  Channels-first operands (x ``NCHW``, w ``KCRS``) would
run the variant-2 tiles instead, whose weight reads fetch a 32-byte sector per element
(8x over-fetch for TF32, 16x for float16).  :func:`relaid` copies such operands once
into channels-last memory (one bandwidth pass each, ``xp.ascontiguousarray`` of the
transposed view, as host steps of the call's program: ``program.host_step``), handed on as the same logical ``(N, C, *S)`` / ``(K, C/G, *KS)``
views; y is written in the caller's layout by the kernel's epilogue (through its
strides).  :func:`relayout_bytes` is what the cost model charges for it.

Not yet: the copy is not fused with the TF32 rounding (under ``precision="tf32"`` the
dispatcher's rounded copy comes first, ``backends.arrays.to_tf32``), and plans and
``ConvOperator`` do not keep re-laid frozen weights (each call copies w again).
"""
from __future__ import annotations

import functools
import math

from ..._kernels import launch, program
from ..._vocabulary import FORWARD

__all__ = ["multistage_applies", "relaid", "relayout_bytes", "channels_last_copy"]


def multistage_applies(problem, *, mma: bool, tf32: bool) -> bool:
    """Whether a multistage tile runs the forward ``problem`` once its operands are
    channels-last (a device with the atoms, whole K-tiles per group, float32 under TF32)."""
    return (mma and problem.op == FORWARD and problem.dtype.itemsize in (2, 4)
            and launch.multistage_tile(problem, tf32) is not None)


def relayout_bytes(problem) -> int:
    """Bytes the re-layout moves when neither operand is channels-last: x and w, each
    read and written once."""
    item = problem.dtype.itemsize
    return 2 * item * (math.prod(problem.x_shape) + math.prod(problem.w_shape))


def channels_last_copy(a, xp):
    """``a`` (a logical ``(lead, C, *S)`` view) copied into channels-last memory, returned
    as the same logical view."""
    return xp.moveaxis(xp.ascontiguousarray(xp.moveaxis(a, 1, -1)), -1, 1)


def relaid(problem, x, w, xp, *, mma: bool, tf32: bool):
    """``(x, w)``, copied into channels-last memory when that lets a multistage tile run
    the forward ``problem`` (channels-first logical views), else as they are."""
    if not multistage_applies(problem, mma=mma, tf32=tf32):
        return x, w
    xs = launch.operand_strides(problem, x, "x")
    ws = launch.operand_strides(problem, w, "w")
    if not launch.channels_last_reason(problem, xs, ws, x, w):
        return x, w                                   # already readable as they are
    copy = functools.partial(channels_last_copy, xp=xp)   # host steps: a compiled call replays them
    x2, w2 = program.host_step("relayout", copy, x), program.host_step("relayout", copy, w)
    xs2 = launch.operand_strides(problem, x2, "x")
    ws2 = launch.operand_strides(problem, w2, "w")
    if launch.channels_last_reason(problem, xs2, ws2, x2, w2):
        return x, w                                   # e.g. C not a multiple of 16 bytes
    return x2, w2
