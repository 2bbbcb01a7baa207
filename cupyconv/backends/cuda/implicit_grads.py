"""The gradients as forward problems of the implicit GEMM (its tensor-core tiles included).

Both gradients of a convolution are themselves convolutions, so the forward kernel
(``implicit_gemm_fprop``, with its DMMA / TF32 / float16 tiles) computes them without a
column buffer; :func:`cupyconv.core.transpose.transpose` derives the forward problem,
:func:`run` launches it on the role-swapped views.

- **weight gradient** (any stride, dilation, padding mode): ``dw[k, c, t] = sum over n, o
  of dy[n, k, o] * xpad[n, c, o * s + d * t]`` is, per group, a forward convolution whose
  *batch* is the group's input channels, whose *input channels* are the images, whose
  *weights* are ``dy`` (out channels ``K/G``, taps = the output positions): the input
  ``x`` transposed to ``(C/G, N, *S)``, the same padding and boundary mode, stride = the
  forward's dilation, dilation = the forward's stride.  Its first ``KS`` output
  positions per axis are ``dw`` (reversed for a flipped, ``convolve``-style, problem);
  its input is cut to what those read (the transposition's ``window``), so it computes ``KS``
  positions, not the tail that a large stride leaves unread by every one of them.
- **input gradient** (stride 1, constant padding, padding at most the dilated kernel's
  extent ``d (k - 1)``): ``dx`` is the forward convolution of ``dy`` (channels ``K``)
  with the channel-transposed, flipped kernel, padded by ``d (k - 1) - p`` on each side
  (:mod:`cupyconv.core.transpose`, shared with Winograd); its output is ``S``
  exactly, no column buffer (the transposed weights are its one workspace). Every other
  input gradient (strides, the other padding modes: adjoints that are not convolutions
  of ``dy``) runs the column-buffer algorithm of :mod:`.gradients` with its GEMM ``W^T
  dy`` on the implicit GEMM too: per batch chunk a rank-1, 1-tap forward problem
  (``groups`` = G, ``K/G`` input channels, ``C/G * prod(KS)`` output channels, the
  chunk's output positions as its length), then ``col2vol`` (:func:`column_program`,
  retargeted by :func:`.gradients.grad_input_program`); the workspace is the gemm
  algorithm's column buffer.

Both take the re-layout step of the forward pass inside their programs: where a
multistage tile fits the role-swapped problem (the weight gradient's channels are the
batch, the input gradient's the output channels) and the cost model says it pays
(:func:`relay_candidate`, ``implicit_choice.relayout_pays`` of the gradient problem), the
re-layout kernel's launches are steps of the program, from the role-swapped views into
channels-last workspaces (TF32 rounding fused), and the forward part is built on the
re-laid operands: the multistage tile, or on compute capability 9.0 the sm_90a wgmma
tile (:func:`.relayout.tile_program`; the portable tiles where its cubin is
unavailable).  Under ``precision="tf32"`` the operands come unrounded
(``CudaBackend.rounds_tf32``); :func:`run` rounds those the program does not re-lay.

One launch per group for the weight gradient (its batch differs per group), one launch
for the input gradient (plus a re-layout launch per re-laid operand). Both are launch programs (:func:`grad_input_program`,
:func:`grad_weight_program`): the forward kernel's launches retargeted onto the
gradient's operands (a pointer into ``dy`` at the crop's offset, into ``x`` and ``dy``
at each group's), the transposed weights written into a workspace and each group's
window copied into ``dw`` as library steps.

**Split-K of the weight gradient.** Unsplit, its reduction runs over all ``N * prod(O)``
positions inside each CTA, so its grid is only ``ceil(C/G * taps / BM) * ceil(K/G / BN)``
CTAs per group.  With ``splits`` = S > 1 (``implicit_choice.weight_gradient_splits``: a divisor of
``N``, where that grid does not fill the device) the images are split into S equal parts
that run as the S *groups* of the same forward launch (``transpose(problem, splits=S)``): the input
channels of the forward problem (the images) fall into S groups by themselves, and its
weights, ``dy``'s group, are copied in split order into a ``(S * K/G, N/S, *O)``
workspace (a library step; where the re-layout runs, one re-layout launch per part writes
it channels-last instead), so each tile (FMA, DMMA, TF32, float16's layout aside,
multistage and wgmma on the re-laid operands) runs unchanged, with S times the CTAs.
The output is the S partial gradients side by side, a program workspace, which the
``splitk_reduce`` kernel (:mod:`cupyconv._kernels.splitk_launch`) sums in part order into
the forward output before the window copy.  Why the images and not a slab of an output
axis or a K-range: a slab would need the padding modes' boundary of the whole axis (a
cropped view reflects at the wrong place), and a K-range a parameter in every tile;
groups every tile has.  float32 and float64 only: the tiles write their output, the
partials, in the storage type, which is the accumulation type only there (float16 and
bfloat16 partials would each round once more).  The split's limit: S divides ``N``.
"""
from __future__ import annotations

import functools
import math

from ..._kernels import grad_launch, launch, program, registry, relayout_launch, splitk_launch
from ..._kernels.grad_launch import fresh_like, fresh_operands
from ..._kernels.program import Call, Program, View
from ..._lru import cached
from ..._vocabulary import FORWARD, GRAD_INPUT, GRAD_WEIGHT
from ...core.transpose import (checked_splits, column_forward, group_views, split_images,
                               transpose, transposed_weights_into, weights_window)
from ...core.roles import Operands
from ..arrays import to_tf32
from . import relayout

__all__ = ["can_implement", "column_program", "split_workspace_bytes", "is_convolution",
           "relay_candidate", "forward_operands", "READ_ROLES", "as_read",
           "needs_columns", "run", "grad_input_program", "grad_weight_program"]


def is_convolution(problem):
    """Whether the input gradient ``problem`` is a forward convolution of ``dy`` (stride 1,
    constant padding of at most ``dilation * (kernel - 1)`` per side); else it runs the
    column-buffer algorithm with the implicit GEMM as its GEMM."""
    return (all(s == 1 for s in problem.stride) and problem.padding_mode == "constant"
            and all(max(pair) <= d * (k - 1) for pair, k, d in
                    zip(problem.padding, problem.kernel_shape, problem.dilation)))


def can_implement(problem):
    """``(ok, reason)`` for a gradient ``problem`` on the implicit GEMM."""
    if problem.dtype.kind == "c":
        return False, ("the implicit GEMM's gradients take real dtypes (complex gradients "
                       "use the conjugate; the column-buffer path has it)")
    if problem.op not in (GRAD_INPUT, GRAD_WEIGHT):
        raise ValueError(f"not a gradient: {problem.op}")
    if problem.op == GRAD_INPUT and not is_convolution(problem):
        return launch.can_implement_implicit_gemm(column_forward(problem, 1))
    return launch.can_implement_implicit_gemm(transpose(problem, splits=1).forward)


def pointer_at(name, offset):
    """The slot of a pointer ``offset`` bytes into the named array (the name itself at 0)."""
    return View(name, offset) if offset else name


@cached(maxsize=256)
def needs_columns(problem):
    """Whether ``problem`` runs the column-buffer algorithm (an input gradient that is not a
    convolution of ``dy``), with its workspace (memoised: the table asks it of one problem
    about six times a call)."""
    return problem.op == GRAD_INPUT and not is_convolution(problem)


def column_program(problem, count, runner, flags):
    """The implicit GEMM's program of :func:`~cupyconv.core.transpose.column_forward`
    (``count`` images) on
    contiguous operands, for :func:`.gradients.grad_input_program` to retarget: ``x`` the
    chunk's ``dy`` matrix ``(G, K/G, cols)``, ``w`` ``W^T`` ``(G, C/G*taps, K/G)``, ``y``
    the column buffer."""
    fwd = column_forward(problem, count)
    return launch.implicit_gemm_program(runner.loader, fwd, *fresh_operands(fwd), **flags)


def forward_operands(problem, operands, splits=1):
    """``(fwd, pairs)``: the forward problem the implicit GEMM runs for ``problem`` (the
    forward pass itself, or a gradient not :func:`needs_columns` names, the weight
    gradient's images in ``splits`` parts) and, per launch (the weight gradient's
    groups), the two operands its kernel reads from these ``operands`` (stand-ins of the
    workspaces a program writes first)."""
    if problem.op == FORWARD:
        return problem, ((operands.activation, operands.filter),)
    if problem.op == GRAD_INPUT:
        fwd, crop, _, wt = _input_operands(problem, operands.output)
        return fwd, ((crop, wt),)
    t = transpose(problem, splits=splits)
    return t.forward, [(x_g, w_g) for x_g, _, w_g in
                       _split_operands(t, problem, operands.activation, operands.output)]


#: The roles of the two operands the implicit GEMM's forward problem reads (its ``x``,
#: its ``w``), per operation.
READ_ROLES = {FORWARD: ("activation", "filter"), GRAD_INPUT: ("output", "filter"),
              GRAD_WEIGHT: ("activation", "output")}


def as_read(problem, operands, relay, frozen_w=False):
    """``operands`` as the program reads them: under TF32 (``relayout.rounds_here``) the
    ones ``relay`` (``(first, second)`` of :data:`READ_ROLES`) does not re-lay are read
    as rounded copies (their stand-ins, ``relayout.rounded_standin``; frozen forward
    weights as they are)."""
    if not relayout.rounds_here(problem):
        return operands
    first, second = READ_ROLES[problem.op]
    copies = {}
    if not relay[0]:
        copies[first] = relayout.rounded_standin(operands.get(first))
    if not (relay[1] or frozen_w):
        copies[second] = relayout.rounded_standin(operands.get(second))
    return operands.replace(**copies)


def relay_candidate(problem, operands, flags, splits=1, frozen_w=False):
    """The re-layout candidate of ``problem`` (not one :func:`needs_columns` names) on these
    operands: ``(relay first operand, relay second)`` of its forward problem
    (:func:`.relayout.relay_choice`, the same for every launch, else ``None``; ``frozen_w``:
    the forward pass's weights were prepared once) or ``None``; whether it pays is the
    caller's to weigh (``implicit_choice.relayout_pays``)."""
    fwd, pairs = forward_operands(problem, operands, checked_splits(problem, splits))
    return relayout.common_relay_choice(fwd, pairs, **flags, frozen_w=frozen_w)


def run(problem, operands, runner, flags, config):
    """The gradient ``problem`` on the implicit GEMM, without a column buffer (its
    workspaces, through ``runner.workspace``: ``W'`` for the input gradient or the forward
    output ``y`` for the weight gradient, weight-sized, and the re-laid operands; not for
    the input gradients :func:`needs_columns` names: those run
    :func:`.gradients.grad_input` with the kernel as its GEMM); ``flags`` are the
    launcher's tensor-core switches (:func:`.implicit_choice.tensor_core_flags`), ``config``
    the backend's :class:`~cupyconv._kernels.kernel_config.KernelConfig` on these
    operands (``implicit_choice.choose_kernel``), built as it is: its re-layout, its
    split-K (:func:`grad_weight_program`) and its tile.  Under ``precision="tf32"`` the
    operands come unrounded (``CudaBackend.rounds_tf32``): the program rounds those it
    re-lays, the others are rounded here first.  Builds (memoised) and executes the
    gradient's program."""
    if problem.op == GRAD_INPUT:
        names, arrays = ("dy", "w"), (operands.output, operands.filter)
        build = grad_input_program
    else:
        names, arrays = ("x", "dy"), (operands.activation, operands.output)
        build = grad_weight_program
    rounds = relayout.rounds_here(problem)
    if rounds:
        arrays = tuple(_rounded_unless(r, a) for r, a in zip(config.relayout, arrays))
    prog = build(problem, *arrays, runner, flags, round_tf32=rounds, config=config)
    bound = dict(zip(names, arrays))
    return program.execute(prog, runner.xp, bound, workspace=runner.workspace)[prog.result]


def _rounded_unless(relaid, a):
    """``a`` rounded to TF32 by a host step, unless the program re-lays (and so rounds) it."""
    return a if relaid else program.host_step("to_tf32", to_tf32, a)


def _relay_steps(runner, a, source, target, round_tf32):
    """``(program, steps, allocation)``: the re-layout of operand ``a`` (read through the
    slot ``source``) into the program workspace ``target``, TF32 rounding fused."""
    st = launch.logical_strides(a, "channels_first", a.ndim - 2)
    prog = relayout_launch.relayout_program(runner.loader, a.dtype, a.shape[0], a.shape[1],
                                            tuple(a.shape[2:]), st, round_tf32)
    (_, shape, dtype), = prog.allocations
    return prog, grad_launch.retarget(prog.launches, {"a": source, "r": target}), (
        target, shape, dtype)


def _input_operands(problem, dy):
    """``(fwd, crop, offset, wt)``: the input gradient's forward problem, ``dy`` cropped
    (``offset`` bytes into ``dy``) and a stand-in of the transposed weights workspace."""
    t = transpose(problem, splits=1)
    fwd, crop = t.forward, dy[(slice(None), slice(None)) + t.window]
    return fwd, crop, grad_launch.byte_offset(crop, dy), fresh_like(fwd.w_shape, fwd.dtype)


def grad_input_program(problem, dy, w, runner, flags, *, round_tf32=False, choice=False,
                       config=None):
    """The input gradient's program: ``W'`` (:func:`transposed_weights_into`) into a
    workspace, where ``choice`` says (``(relay_dy, relay_w)`` or ``None``; default the
    candidate, :func:`relay_candidate`) the re-layout of ``dy`` cropped and of ``W'``
    into channels-last workspaces (rounded to TF32 under ``round_tf32``), then the
    forward kernel (:func:`.relayout.tile_program`) on them, or on ``dy`` cropped (a
    pointer into ``dy``) and ``W'``, into ``dx``.  ``config``: the backend's record
    (:func:`run`), whose re-layout and tile are built as they are (``choice`` unread)."""
    launch.check_dtype(problem, dy=dy, w=w)
    fwd, crop, offset, wt = _input_operands(problem, dy)
    if config is not None:
        choice = config.relayout
    elif choice is False:
        choice = relayout.relay_choice(fwd, crop, wt, **flags)
    relay_dy, relay_w = choice or (False, False)
    parts, pre, allocs = [], [], []
    slots = {"x": pointer_at("dy", offset), "w": "wt", "y": "dx"}
    operands = [crop, wt]
    for i, (relay, a, name) in enumerate(((relay_dy, crop, "x"), (relay_w, wt, "w"))):
        if relay:
            target = "dyl" if name == "x" else "wtl"
            prog, steps, alloc = _relay_steps(runner, a, slots[name], target, round_tf32)
            parts.append(prog)
            pre += steps
            allocs.append(alloc)
            slots[name], operands[i] = target, relayout.relaid_standin(a)
    part = relayout.tile_program(fwd, *operands, runner, flags, config)

    def build():
        return Program("grad_input implicit_gemm", ("dy", "w"), (
            ("dx", tuple(fwd.y_shape), problem.dtype), ("wt", tuple(fwd.w_shape), problem.dtype),
            *allocs), (Call(functools.partial(transposed_weights_into, problem), ("w", "wt")),)
            + tuple(pre) + grad_launch.retarget(part.launches, slots), "dx")
    return grad_launch.composed(("dgrad", problem, offset, round_tf32), (*parts, part), build)


def split_workspace_bytes(problem, splits):
    """Bytes of the split-K's own workspaces: the copy of one group of ``dy`` in split
    order (or its re-laid twin) and the partials (0 unsplit)."""
    if splits == 1:
        return 0
    fwd = transpose(problem, splits=splits).forward
    return problem.dtype.itemsize * (math.prod(fwd.w_shape) + math.prod(fwd.y_shape))


def _split_operands(t, problem, x, dy):
    """Per group ``(x_g, dy_g, w_g)`` of the weight gradient's transposition ``t``:
    :func:`~cupyconv.core.transpose.group_views` and the weights the forward kernel reads:
    ``dy_g`` itself, or (split) a stand-in of its copy in split order."""
    fwd = t.forward
    return [(x_g, dy_g, dy_g if t.splits == 1 else fresh_like(fwd.w_shape, fwd.dtype))
            for x_g, dy_g in group_views(t, problem, x, dy)]


def grad_weight_program(problem, x, dy, runner, flags, *, round_tf32=False, choice=False,
                        splits=1, config=None):
    """The weight gradient's program: per group, where ``choice`` says (``(relay_x,
    relay_dy)`` or ``None``; default the candidate, :func:`relay_candidate`) that group of
    ``x`` and ``dy`` re-laid into channels-last workspaces (rounded to TF32 under
    ``round_tf32``), then the forward kernel (:func:`.relayout.tile_program`) on them, or
    on the group's views (pointers at its offsets, first two axes swapped), into a
    workspace ``y``, whose first ``KS`` positions (reversed for a flipped problem) are
    copied into the group's rows of ``dw``.

    ``splits`` > 1 (a divisor of the batch, ``implicit_choice.weight_gradient_splits``): split-K.
    The group's images are split into ``splits`` equal parts, run as the groups of one
    forward launch (``transpose(problem, splits=splits)``: ``splits`` times the CTAs,
    each reducing over ``N/splits * prod(O)`` positions); its weights are ``dy``'s group
    copied in split order into a workspace (a library step; with the re-layout, one
    re-layout launch per part writes it channels-last instead), its output the partials workspace ``yp``, which
    the reduction kernel (:func:`~cupyconv._kernels.splitk_launch.reduce_step`) sums into
    ``y`` in part order.  float32 and float64 only (the tiles write partials in the
    storage type, which must be the accumulation type for the split to add no rounding).
    ``config``: the backend's record (:func:`run`), whose re-layout, split-K and tile are
    built as they are (``choice`` and ``splits`` unread)."""
    launch.check_dtype(problem, x=x, dy=dy)
    if config is not None:
        choice, splits = config.relayout, config.splits
    t = transpose(problem, splits=splits)       # (checks splits: a divisor of the batch)
    splits, fwd, kg = t.splits, t.forward, problem.out_channels // problem.groups
    cg = problem.in_channels // problem.groups
    if splits > 1 and problem.dtype not in registry.SPLITK_DTYPES:
        raise ValueError(f"the weight gradient's split-K takes float32 or float64 (its partials "
                         f"are the tiles' outputs); got {problem.dtype.name}")
    if choice is False:
        choice = relay_candidate(problem, Operands(activation=x, output=dy), flags, splits)
    relay_x, relay_dy = choice or (False, False)
    parts, groups, allocs = [], [], {}
    for gi, (x_g, dy_g, w_g) in enumerate(_split_operands(t, problem, x, dy)):
        # the group's first channel (its window, ``t.window``, starts at each axis' start)
        offsets = (gi * cg * x.strides[1], gi * kg * dy.strides[1])
        slots = {"x": pointer_at("x", offsets[0]), "w": pointer_at("dy", offsets[1])}
        operands, pre, post = [x_g, w_g], [], ()
        if splits > 1:
            slots["y"] = "yp"
            allocs["yp"] = ("yp", tuple(fwd.y_shape), problem.dtype)
            post = (splitk_launch.reduce_step(
                runner.loader, problem.dtype, fwd.batch, splits,
                fwd.out_channels // splits * math.prod(fwd.out_shape), ("yp", "y"),
                problem.ndim),)
        for i, (relay, a, name) in enumerate(((relay_x, x_g, "x"), (relay_dy, dy_g, "w"))):
            if relay and name == "w" and splits > 1:   # each part re-laid into its rows
                pre += _relay_split_steps(runner, dy, dy_g, splits, round_tf32, parts, allocs)
                slots["w"], operands[1] = "wl", relayout.relaid_standin(w_g)
            elif relay:            # one workspace per operand, reused by every group
                prog, steps, alloc = _relay_steps(runner, a, slots[name], name + "l",
                                                  round_tf32)
                parts.append(prog)
                pre += steps
                allocs[alloc[0]] = alloc
                slots[name], operands[i] = name + "l", relayout.relaid_standin(a)
            elif name == "w" and splits > 1:
                pre.append(Call(functools.partial(_split_into, t, kg, gi), ("dy", "dys")))
                allocs["dys"] = ("dys", tuple(fwd.w_shape), problem.dtype)
                slots["w"] = "dys"
        part = relayout.tile_program(fwd, *operands, runner, flags, config)
        parts.append(part)
        groups.append((offsets, tuple(pre), part, slots, tuple(filter(None, post))))
    name = "grad_weight implicit_gemm" + (f" split-K x{splits}" if splits > 1 else "")

    def build():
        steps = []
        for gi, (_, pre, part, slots, post) in enumerate(groups):
            steps += pre + grad_launch.retarget(part.launches, slots) + post
            steps.append(Call(functools.partial(_window_into, t, kg, gi), ("y", "dw")))
        return Program(name, ("x", "dy"), (
            ("dw", tuple(problem.w_shape), problem.dtype),
            ("y", (fwd.batch, kg) + fwd.out_shape, problem.dtype),
            *allocs.values()), tuple(steps), "dw")
    return grad_launch.composed(("wgrad", problem, tuple([g[0] for g in groups]), round_tf32,
                                 splits), parts, build)


def _relay_split_steps(runner, dy, dy_g, splits, round_tf32, parts, allocs):
    """The re-layout launches writing ``dy_g`` (``(K/G, N, *O)``) channels-last in split
    order, part ``s``'s images ``(K/G, N/splits, *O)`` at row ``s * K/G`` of the workspace
    ``wl`` (``(splits * K/G, *O, N/splits)``); their programs appended to ``parts``, the
    workspace to ``allocs``."""
    ns, steps = dy_g.shape[1] // splits, []
    for s in range(splits):
        a = dy_g[:, s * ns:(s + 1) * ns]
        prog, part_steps, (_, shape, dtype) = _relay_steps(
            runner, a, pointer_at("dy", grad_launch.byte_offset(a, dy)),
            pointer_at("wl", s * math.prod(a.shape) * a.dtype.itemsize), round_tf32)
        parts.append(prog)
        steps += part_steps
    allocs["wl"] = ("wl", (splits * shape[0],) + tuple(shape[1:]), dtype)
    return steps


def _split_into(t, kg, gi, dy, dys):
    """``dys`` ``(splits * K/G, N/splits, *O)`` = group ``gi`` (``kg`` = K/G channels) of
    ``dy`` with its first two axes swapped, its images in split order (part ``s`` at rows
    ``s * K/G``, :func:`~cupyconv.core.transpose.split_images` of the transposition
    ``t``)."""
    src = split_images(t, dy[:, gi * kg:(gi + 1) * kg].swapaxes(0, 1))
    dys.reshape(src.shape)[...] = src


def _window_into(t, kg, gi, y, dw):
    """``dw``'s rows of group ``gi`` (``kg`` = K/G rows) = the weight window of the forward
    output ``y`` (:func:`~cupyconv.core.transpose.weights_window` of the transposition
    ``t``: the first ``KS`` positions, reversed for a convolve-style, flipped, problem,
    first two axes swapped)."""
    dw[gi * kg:(gi + 1) * kg] = weights_window(t, y)
