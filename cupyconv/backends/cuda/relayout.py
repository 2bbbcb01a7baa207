"""Channel-contiguous operands for the multistage implicit GEMM (issue 26, item 1).

The multistage tiles (``launch.multistage_tile``, tile variant 4) and the float64 DMMA
tiles' channels-last twins (variants 9 and 10, ``registry.channels_last_twin``) read x and
w as channels-last memory: every K-tile row is 128 consecutive bytes of channels, one L2
sector fetched per sector used (the float64 tiles 6 and 7 on KCRS weights fetch 4).
Channels-first operands (x ``NCHW``, w ``KCRS``) would run the variant-2 tiles instead,
whose weight reads fetch a 32-byte sector per element (8x over-fetch for TF32, 16x for
float16).  :func:`relaid` re-lays such operands with
the re-layout kernel (``cuda_src/conv/relayout.cu``: one bandwidth pass per operand, a
launch program of :mod:`cupyconv._kernels.relayout_launch`, so a compiled call replays
it), handed on as the same logical ``(N, C, *S)`` / ``(K, C/G, *KS)`` views; y is written
in the caller's layout by the kernel's epilogue (through its strides).

TF32: under ``precision="tf32"`` the dispatcher leaves the rounding of the implicit
GEMM's operands to this step (``CudaBackend.rounds_tf32``): a re-laid operand is rounded
in the same pass, one that is read as it is gets ``backends.arrays.to_tf32``'s rounded
copy (what the dispatcher made before).

Frozen weights: :func:`freeze_filter` prepares a weight array once (re-laid and rounded
as :func:`relaid` would, for the problem a plan or ``ConvOperator`` holds) and remembers
the prepared array; :func:`relaid` hands a remembered array on as it is, so a repeated
call re-lays only x.  :func:`relayout_bytes` is what the cost model charges.

The gradients that run on the implicit GEMM as forward problems (``implicit_grads``) take
the same step on their role-swapped operands inside their launch programs: they ask
:func:`relay_choice` (what :func:`relaid` decides on, given stand-ins of the re-laid
operands: :func:`relaid_standin`) and make the re-layout launches steps of the gradient's
program, into its workspaces; the operands they do not re-lay are rounded first.

Whether a re-layout pays is the cost model's (``implicit_choice.relayout_pays``): the
backend's one kernel choice (``implicit_choice.choose_kernel``) asks it of
:func:`relay_choice`'s candidate and hands its record down (``choice``: its
``relayout``); without one, a candidate is taken.  :func:`tile_program` builds the
record's tile on the operands as they then are (without a record, :func:`operand_config`:
the sm_90a wgmma tile where it runs, else the portable tiles).
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from ..._compile.compat import ArchSpecificUnavailable
from ..._kernels import evidence, launch, program, registry, relayout_launch, wgmma_launch
from ..._kernels.addressing import data_pointer
from ..._kernels.grad_launch import fresh_like
from ..._kernels.kernel_config import gemm_config
from ..._vocabulary import FORWARD
from ..arrays import to_tf32
from ..._lru import cached

__all__ = ["multistage_applies", "rounds_here", "relaid", "relay_choice", "common_relay_choice",
           "relaid_standin", "rounded_standin",
           "relayout_bytes", "relay", "freeze_filter", "filter_relays", "is_frozen",
           "tile_program", "operand_config", "wgmma_tile"]

#: Prepared (frozen) weights: key of the logical view -> a weak reference to it.
_FROZEN: "dict" = {}


def multistage_applies(problem, *, mma: bool, tf32: bool, verified_on=None) -> bool:
    """Whether a channels-last tile runs the forward ``problem`` once its operands are
    channels-last (a device with the atoms): a multistage tile (whole K-tiles per group,
    float32 under TF32), or for float64 the channels-last twin of the DMMA tile the
    launcher chooses (``registry.channels_last_twin``: C/G a multiple of 16);
    ``verified_on`` (an arch class): only where that tile is verified on hardware of
    the class (``_kernels.evidence``)."""
    if not (mma and problem.op == FORWARD):
        return False
    if np.dtype(problem.dtype) == np.float64:
        keep = {} if verified_on is None else {"verified_on": verified_on}
        tile = registry.channels_last_twin(launch.implicit_gemm_tile(problem, mma, tf32, **keep))
    elif problem.dtype.itemsize in (2, 4):
        tile = launch.multistage_tile(problem, tf32)
    else:
        tile = None
    return tile is not None and (verified_on is None or evidence.is_verified(
        gemm_config(tile, problem.dtype, verified_on)))


def rounds_here(problem) -> bool:
    """Whether the implicit GEMM rounds ``problem``'s operands to TF32 itself: float32
    under ``precision="tf32"`` (the dispatcher leaves it to :func:`relaid`:
    ``CudaBackend.rounds_tf32``)."""
    return problem.precision == "tf32" and np.dtype(problem.dtype) == np.float32


def relayout_bytes(problem, *, x: bool = True, weights: bool = True) -> int:
    """Bytes the re-layout of ``problem``'s x and (unless ``weights`` is False: frozen
    weights were re-laid once) w moves, each read and written once (``x`` False: w
    alone)."""
    item = problem.dtype.itemsize
    return 2 * item * (x * math.prod(problem.x_shape) + weights * math.prod(problem.w_shape))


def relay(a, runner, round_tf32: bool):
    """``a`` (a logical ``(lead, C, *S)`` view) re-laid by the kernel into contiguous
    ``(lead, *S, C)`` memory, returned as the same logical view; ``round_tf32`` rounds
    float32 to TF32 in the same pass."""
    st = launch.logical_strides(a, "channels_first", a.ndim - 2)
    prog = relayout_launch.relayout_program(runner.loader, a.dtype, a.shape[0], a.shape[1],
                                            tuple(a.shape[2:]), st, round_tf32)
    r = program.execute(prog, runner.xp, {"a": a})[prog.result]
    return relayout_launch.relaid_view(runner.xp, r)


def _key(a, rounded):
    return (data_pointer(a), tuple(a.shape), tuple(a.strides), a.dtype.str, bool(rounded))


def is_frozen(a, rounded: bool) -> bool:
    """Whether ``a`` is a view :func:`freeze_filter` prepared (rounded to TF32 when
    ``rounded``) and still alive."""
    ref = _FROZEN.get(_key(a, rounded))
    return ref is not None and ref() is not None


def _remember(a, rounded):
    key = _key(a, rounded)
    try:
        _FROZEN[key] = weakref.ref(a, lambda _r, key=key: _FROZEN.pop(key, None))
    except TypeError:       # an array type without weak references: prepared, not remembered
        pass
    return a


def _channels_first(problem, a, which):
    return launch.operand_strides(problem, a, which)[0][1] != 1


def relaid_standin(a):
    """A host stand-in for ``a`` re-laid (:func:`relay`): the logical view of a fresh
    contiguous ``(lead, *S, C)`` allocation, its strides and a 256-byte aligned pointer
    (never read: what a launch program is built on before the re-layout runs; the dtype
    itself, not its ``str``: bfloat16's is a void type)."""
    return _standin((a.shape[0],) + tuple(a.shape[2:]) + (a.shape[1],), np.dtype(a.dtype))


def rounded_standin(a):
    """A host stand-in for ``a``'s rounded copy (``to_tf32``: a fresh allocation in ``a``'s
    memory order, ``order="K"``: its axes by decreasing stride magnitude), as
    :func:`relaid_standin` is for its re-laid one."""
    order = sorted(range(a.ndim), key=lambda i: -abs(a.strides[i]))
    base = fresh_like(tuple(a.shape[i] for i in order), np.dtype(a.dtype))
    return base.transpose(tuple(np.argsort(order)))


@cached(maxsize=256)
def _standin(shape, dtype):
    return relayout_launch.relaid_view(np, fresh_like(shape, dtype))


def relay_choice(problem, x, w, *, mma: bool, tf32: bool, frozen_w: bool = False,
                 verified_on=None):
    """``(relay_x, relay_w)``: which of the forward ``problem``'s operands to re-lay
    channels-last so that a multistage tile runs it, or ``None`` when none is (no tile
    fits, both are channels-last already, or the re-laid operands would not fit the tile
    either): the candidate whose cost the caller weighs (``implicit_choice.relayout_pays``
    with ``weights=relay_w``).  ``frozen_w``: the weights were prepared once
    (:func:`freeze_filter`) and are taken as they are; ``verified_on``: as
    :func:`multistage_applies`."""
    if not multistage_applies(problem, mma=mma, tf32=tf32, verified_on=verified_on):
        return None
    xs, ws = launch.input_strides(problem, x, w)
    if not launch.channels_last_reason(problem, xs, ws, x, w):
        return None
    relay_x = _channels_first(problem, x, "x")
    relay_w = not frozen_w and _channels_first(problem, w, "w")
    if not (relay_x or relay_w):
        return None
    x2 = relaid_standin(x) if relay_x else x
    w2 = relaid_standin(w) if relay_w else w
    if launch.channels_last_reason(problem, launch.operand_strides(problem, x2, "x"),
                                   launch.operand_strides(problem, w2, "w"), x2, w2):
        return None
    return relay_x, relay_w


def common_relay_choice(problem, pairs, *, mma: bool, tf32: bool, frozen_w: bool = False,
                        verified_on=None):
    """:func:`relay_choice` of the forward ``problem`` on each ``(x, w)`` of ``pairs`` (the
    launches of one call: the weight gradient's groups), where it is the same for all;
    else ``None`` (none is re-laid)."""
    choices = {relay_choice(problem, x, w, mma=mma, tf32=tf32, frozen_w=frozen_w,
                            verified_on=verified_on) for x, w in pairs}
    return choices.pop() if len(choices) == 1 else None


def relaid(problem, x, w, runner, *, mma: bool, tf32: bool, round_tf32: bool = False,
           choice=False, verified_on=None):
    """``(x, w)`` ready for the implicit GEMM of the forward ``problem``: the channels-first
    operands ``choice`` names (``(relay_x, relay_w)`` or ``None``: the backend's decision,
    :func:`relay_choice` where the re-layout pays; default: :func:`relay_choice`'s
    candidate, frozen weights taken as they are) re-laid into channels-last memory, and under ``round_tf32`` (the dispatcher
    left the TF32 rounding to this step) both rounded (fused into the re-layout, else a
    rounded copy).  Frozen weights (:func:`freeze_filter`) are taken as they are."""
    frozen_w = is_frozen(w, round_tf32)
    if choice is False:
        choice = relay_choice(problem, x, w, mma=mma, tf32=tf32, frozen_w=frozen_w,
                              verified_on=verified_on)
    relay_x, relay_w = choice or (False, False)
    if relay_x:
        x = relay(x, runner, round_tf32)
    elif round_tf32:
        x = _rounded(x)
    if relay_w:
        w = relay(w, runner, round_tf32)
    elif round_tf32 and not frozen_w:
        w = _rounded(w)
    return x, w


def _rounded(a):
    return program.host_step("to_tf32", to_tf32, a)


def filter_relays(problem, w, *, mma: bool, tf32: bool, verified_on=None) -> bool:
    """Whether :func:`freeze_filter` may re-lay ``w``: a channels-last tile runs the forward
    ``problem`` and ``w`` is channels-first (whether it pays, re-laying x alone per call,
    is the caller's to weigh)."""
    return (multistage_applies(problem, mma=mma, tf32=tf32, verified_on=verified_on)
            and _channels_first(problem, w, "w"))


def freeze_filter(problem, w, runner, *, mma: bool, tf32: bool, round_tf32: bool,
                  relay_w=None, verified_on=None):
    """The weights ``w`` of the forward ``problem`` prepared once for the implicit GEMM
    (as :func:`relaid` prepares them per call; ``relay_w``: the backend's decision to
    re-lay them, default :func:`filter_relays`) and remembered, so that :func:`relaid`
    takes them as they are; ``w`` itself when nothing would be done to it."""
    if relay_w is None:
        relay_w = filter_relays(problem, w, mma=mma, tf32=tf32, verified_on=verified_on)
    if relay_w:
        return _remember(relay(w, runner, round_tf32), round_tf32)
    if round_tf32 and np.dtype(w.dtype) == np.float32:
        return _remember(to_tf32(w), True)
    return w


def tile_program(problem, x, w, runner, flags, config=None):
    """The forward program of the implicit GEMM on these operands (re-laid or as they
    are): the record ``config`` (default :func:`operand_config`: the selection on these
    operands; ``flags``: ``implicit_choice.tensor_core_flags``) built as it is; a wgmma record
    whose cubin the loader cannot give (``ArchSpecificUnavailable``: missing, refused by
    the driver, another device; the loader keeps the reason for ``info``,
    ``loader.arch_specific_refusals()``) gives way to the portable tile's."""
    if config is None:
        config = operand_config(problem, x, w, runner.static, flags)
    if config.math == "wgmma":
        try:
            return wgmma_launch.wgmma_program(runner.loader, problem, x, w,
                                              tile=config.gemm_tile, tf32=flags["tf32"])
        except ArchSpecificUnavailable:
            config = _portable_config(problem, x, w, runner.static, flags)
    return launch.implicit_gemm_program(runner.loader, problem, x, w, tf32=flags["tf32"],
                                        config=config)


def operand_config(problem, x, w, device, flags):
    """The :class:`~cupyconv._kernels.kernel_config.KernelConfig` of the implicit GEMM on
    the forward ``problem`` with these operands (re-laid or as they are) on ``device``: the
    wgmma tile where it runs (:func:`wgmma_tile`), else the portable tile of
    ``launch.gemm_tile_for`` (a channels-last tile where the operands are channels-last
    readable; ``flags``: ``implicit_choice.tensor_core_flags``)."""
    tile = wgmma_tile(problem, x, w, device, flags["tf32"])
    if tile is not None:
        return gemm_config(tile, problem.dtype, evidence.arch_class(device.arch, True),
                           launch.choose_index64(problem))
    return _portable_config(problem, x, w, device, flags)


def _portable_config(problem, x, w, device, flags):
    xs, ws = launch.input_strides(problem, x, w)
    tile = launch.gemm_tile_for(problem, xs, ws, x, w, **flags)
    return gemm_config(tile, problem.dtype, evidence.arch_class(device.arch),
                       launch.choose_index64(problem))


def wgmma_tile(problem, x, w, device, tf32):
    """The sm_90a wgmma tile (``_kernels/wgmma_launch``) where it runs ``problem`` on these
    operands on ``device`` (compute capability 9.0 only), else ``None``: also where the
    evidence ledger keeps the choice to verified tiles and this one is not
    (``_kernels.evidence``)."""
    if device.arch != wgmma_launch.WGMMA_ARCH:
        return None
    tile = wgmma_launch.wgmma_applies(problem, x, w, tf32, device.arch)
    if tile is None or (evidence.verified_only(device.hardware) and not evidence.is_verified(
            gemm_config(tile, problem.dtype, evidence.arch_class(device.arch, True)))):
        return None
    return tile
