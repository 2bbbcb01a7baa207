"""The ``separable`` algorithm on the CUDA path: one 1-D pass per axis, each a launch of
the direct (stencil) kernel.

A kernel that is an outer product of 1-D factors (:mod:`..separable_factors`, shared
with the NumPy backend) runs as a sequence of depthwise problems, one per kernel axis:
the pass along axis ``a`` is the :class:`~cupyconv.core.ConvProblem` with ``groups =
in = out channels = G``, kernel extent ``K_a`` on axis ``a`` and 1 elsewhere, the
problem's stride, dilation and padding on axis ``a`` only, the problem's boundary mode
and ``flip=False`` (the factors are already oriented).  The direct kernel handles any
rank, stride, dilation and all five boundary modes, so no kernel is compiled for this
algorithm, and none per weights shape: the kernels are built ahead of time per dtype and
rank.

- **Boundary.** Each pass pads its own axis: the reflecting, periodic and edge modes
  commute with a filter along another axis, and a constant ``cval`` becomes ``cval``
  times the product of the sums of the factors already applied (a constant line filters
  to ``cval * sum``), exactly as :func:`cupyconv.backends.numpy.separable.run`.
- **Trivial axes.** An axis with one tap, stride 1 and no padding scales by one number:
  it runs no pass, its scalar is folded into the last pass (after every padding, so the
  ``cval`` scaling never sees it).
- **Sums of outer products.** A kernel that is a short sum of outer products
  (:func:`~..separable_factors.kernel_terms`) runs each term's passes in turn; the last
  pass of every term after the first adds into the result (the direct kernel's
  ``beta = 1`` epilogue).
- **Memory.** The intermediate results live in two ping-pong buffers (one workspace
  allocation, reused by every term); the last pass writes the result.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..._kernels import launch
from ..._kernels.program import Program, View, execute
from ..._lru import cached, memoized
from ..._vocabulary import FORWARD
from ..arrays import zeros_result
from ..base import OutOfMemoryError
from ..separable_factors import NOT_APPLICABLE, NotSeparable, applies, kernel_terms, term_limit

__all__ = ["can_implement", "pass_problems", "pass_plans", "workspace_bytes", "separable_program",
           "clear_program_cache", "run"]


def _trivial(problem, axis):
    """True when the pass along ``axis`` is a scaling (one tap, stride 1, no padding)."""
    return (problem.kernel_shape[axis] == 1 and problem.stride[axis] == 1
            and problem.padding[axis] == (0, 0))


@cached(maxsize=256)
def pass_problems(problem):
    """``((axis, pass problem), ...)``: the depthwise 1-D problems the passes launch.

    Data-free (the ``cval`` of each pass is the problem's; :func:`pass_plans` scales it).
    ``problem`` must be one :func:`~..separable_factors.applies` accepts.
    """
    r = problem.ndim
    shape = list(problem.in_shape)
    out = []
    for axis in range(r):
        if _trivial(problem, axis):
            continue
        one = [1] * r
        ks, stride, dilation = list(one), list(one), list(one)
        pads = [(0, 0)] * r
        ks[axis], stride[axis] = problem.kernel_shape[axis], problem.stride[axis]
        dilation[axis], pads[axis] = problem.dilation[axis], problem.padding[axis]
        in_shape = tuple(shape)
        shape[axis] = problem.out_shape[axis]
        # what ConvProblem.create gives for these arguments, without validating again a
        # geometry the (validated) problem implies: depthwise, channels-first forward
        out.append((axis, dataclasses.replace(
            problem, in_shape=in_shape, kernel_shape=tuple(ks), out_shape=tuple(shape),
            stride=tuple(stride), dilation=tuple(dilation), padding=tuple(pads),
            layout="channels_first", flip=False, op=FORWARD, conjugate=True,
            precision="highest")))
    return tuple(out)


def can_implement(problem, smem_limit):
    """``(ok, reason)``: :func:`applies`, and the direct kernel runs every pass."""
    if not applies(problem):
        return False, NOT_APPLICABLE
    for axis, p in pass_problems(problem):
        ok, why = launch.can_implement_direct(p, smem_limit)
        if not ok:
            return False, f"the direct kernel cannot run the 1-D pass along axis {axis}: {why}"
    return True, ""


def _buffer_elements(problem):
    """Elements of the two ping-pong buffers: the largest intermediate each one holds."""
    sizes = [0, 0]
    passes = pass_problems(problem)
    for i, (_, p) in enumerate(passes[:-1]):                 # the last pass writes y
        sizes[i % 2] = max(sizes[i % 2], p.batch * p.out_channels * math.prod(p.out_shape))
    return sizes


@cached(maxsize=256)
def workspace_bytes(problem):
    """Bytes of the pass buffers (the intermediate results; memoised: the chooser asks
    the least and the full workspace of one problem)."""
    return sum(_buffer_elements(problem)) * problem.dtype.itemsize


def _wrap_int64(v):
    return (int(v) + 2**63) % 2**64 - 2**63


def _scaled_cval(problem, scale):
    """``cval * scale`` as the kernels take it (a double pair; integers wrap as int64)."""
    if problem.dtype.kind in "biu":
        v = _wrap_int64(int(np.real(problem.cval)) * scale)
        if int(float(v)) != v:
            raise NotSeparable(
                f"method='separable' cannot run this problem: the filtered padding value "
                f"cval * (product of factor sums) = {v} is not exactly representable as "
                "the kernels' float64 fill value; use method='auto'")
        return v
    if problem.dtype.kind == "c":
        return complex(problem.cval) * complex(scale)
    return float(np.real(problem.cval)) * float(np.real(scale))


def pass_plans(problem, w, max_terms=1):
    """One :func:`_pass_plan` per outer product of the weights ``w`` ``(G, 1, *KS)``, a
    NumPy array (the runner's ``host_copy`` of the device's: the factors are found on the
    host), at most ``max_terms`` (:func:`~..separable_factors.kernel_terms`).

    Raises
    ------
    NotSeparable
        When a kernel is not a sum of ``max_terms`` outer products (naming the
        reconstruction error), the groups' factor sums differ under a nonzero ``cval``,
        or a scaled integer ``cval`` is not exactly representable.
    """
    return [_pass_plan(problem, per_group)
            for per_group in kernel_terms(problem, w, max_terms)]


def _pass_plan(problem, per_group):
    """``[(axis, pass problem, taps (G, K_a)), ...]`` of one outer product
    ``per_group[g][axis]``.

    The taps are in the problem dtype, the scalars of the trivial axes folded into the
    last pass; each pass problem carries its scaled ``cval``.
    """
    g, dtype = problem.groups, problem.dtype
    passes = pass_problems(problem)
    wide = np.complex128 if dtype.kind == "c" else (np.int64 if dtype.kind in "biu"
                                                     else np.float64)
    folded = np.ones(g, dtype=wide)
    for axis in range(problem.ndim):
        if _trivial(problem, axis):      # array products: integers wrap silently, as the taps
            folded = folded * np.array([per_group[i][axis][0] for i in range(g)], dtype=wide)
    constant = problem.padding_mode == "constant" and problem.cval != 0
    scale = 1
    plan = []
    for j, (axis, p) in enumerate(passes):
        taps = np.stack([np.asarray(per_group[i][axis], dtype=wide) for i in range(g)])
        if j == len(passes) - 1:
            taps = taps * folded[:, None]
        taps = taps.astype(dtype)
        if constant:
            p = p.with_(cval=_scaled_cval(problem, scale))
            # a constant line filters to cval * sum (the groups' sums agree: kernel_factors)
            s = taps[0].astype(wide).sum()
            scale = scale * (int(s) if dtype.kind in "biu" else complex(s))
        plan.append((axis, p, taps))
    return plan


def separable_program(problem, x, w, runner):
    """The :class:`~cupyconv._kernels.program.Program` of :func:`run` on ``x`` and the
    weights ``w`` (a NumPy array: its values shape the program): every term's passes as
    direct-kernel launches on ``x``, the two ping-pong pass buffers (one allocation,
    ``buf``) and ``y``; the taps are program constants on the device in the problem's
    dtype, found from the values of the operand ``w`` (bound to the weights the host
    copy came from: :attr:`~cupyconv._kernels.program.Program.host_reads`).  Memoised per problem, ``x`` strides, weights' bytes and runner, so a repeated
    call makes no factorisation and no host-to-device copy."""
    launch.check_dtype(problem, x=x)
    launch.check_addressable(x=x)
    w = np.ascontiguousarray(w, dtype=problem.dtype)
    return _separable_build(problem, launch.operand_strides(problem, x, "x"), w.tobytes(),
                            runner)


@memoized(256)
def _separable_build(problem, xs, wbytes, runner):
    w = np.frombuffer(wbytes, problem.dtype).reshape(problem.w_shape)
    plans = pass_plans(problem, w, term_limit(problem))
    sizes = _buffer_elements(problem)
    item, r = problem.dtype.itemsize, problem.ndim
    bases = (0, sizes[0] * item)
    smem = runner.static.smem_per_block
    steps, constants = [], []
    for t, plan in enumerate(plans):
        src, src_strides = "x", xs
        for j, (axis, p, taps) in enumerate(plan):
            last = j == len(plan) - 1
            dst = "y" if last else View("buf", bases[j % 2])
            wshape = (p.groups, 1) + (1,) * axis + (taps.shape[1],) + (1,) * (r - axis - 1)
            name = f"taps{t}.{j}"
            constants.append((name, runner.constant(taps.reshape(wshape))))
            prog = launch.direct_program_on(
                runner.loader, p, src_strides, launch.contiguous_strides(p, "w"),
                launch.contiguous_strides(p, "y"), beta=1 if last and t else 0,
                smem_limit=smem)
            where = {"x": src, "w": name, "y": dst}
            steps += [dataclasses.replace(s, slots=tuple(where[n] for n in s.slots))
                      for s in prog.launches]
            src, src_strides = dst, launch.contiguous_strides(p, "y")   # the next x
    allocations = [("y", tuple(problem.y_shape), problem.dtype)]
    if any(type(v) is View for s in steps for v in s.slots):   # (empty buffers included)
        allocations.append(("buf", (sum(sizes),), problem.dtype))
    return Program("separable", ("x", "w"), tuple(allocations), tuple(steps), "y",
                   constants=tuple(constants), host_reads=("w",))


def clear_program_cache():
    """Forget the memoised ``separable`` programs (they hold the runners' kernels)."""
    _separable_build.cache_clear()


def run(problem, x, w, runner, workspace_limit=None):
    """``y`` ``(N, G, *O)`` of an :func:`applies` problem by one direct-kernel launch per
    non-trivial axis (:func:`separable_program`); out-of-memory for the buffers is
    :class:`OutOfMemoryError`."""
    xp = runner.xp
    if problem.is_empty:
        return zeros_result(problem, xp)
    need = workspace_bytes(problem)
    if workspace_limit is not None and need > workspace_limit:
        raise OutOfMemoryError(f"separable needs {need} bytes of pass buffers; "
                               f"workspace_limit is {workspace_limit}")
    prog = separable_program(problem, x, runner.host_copy(w), runner)
    return execute(prog, xp, {"x": x, "w": w}, workspace=runner.workspace)["y"]
