"""Issue 24: the gradients, ``conv_transpose``, ``ConvOperator`` and the derivative
filters as launch programs and compiled calls (issue 28 part 2: one compiled call per
derivative filter).

As in ``test_compiled_calls.py``: every body runs on the emulated runner (and on CuPy
where a GPU is present), the normal path is the same call with ``config.compiled_calls``
off, and a compiled call must give its result bit for bit (the same programs, the same
parameter bytes, the same library calls in the same order): ``array_equal``, never a
tolerance.
"""
from __future__ import annotations


import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import cupyconv
from cupyconv import config, grad, ndimage
from cupyconv._kernels import launch, program
from cupyconv.api.compiled import CompiledCall, lookup
from cupyconv.backends.cuda import gradients, implicit_grads, runners
from cupyconv.core.problem import ConvProblem
from cupyconv.grad import ConvOperator, convolve_vjp
from helpers import (alternate_against_the_normal_path, called_twice, forget_launches,
                     normal_path, small_ints)

F32 = np.dtype(np.float32)


def _data(dev, rng, *shapes):
    return [dev.to_dev(small_ints(rng, s, F32)) for s in shapes]


# ------------------------------------------------------------ launch programs
#: ``(family, op, geometry)``: every CUDA-path gradient program (the column buffer with
#: cuBLAS, with the implicit GEMM as its GEMM, and the implicit GEMM's forward problems).
FAMILIES = [("gemm", "grad_input", dict(padding=1, groups=2)),
            ("gemm", "grad_weight", dict(stride=2, padding=1, groups=2)),
            ("implicit_gemm", "grad_input", dict(padding=1, groups=2)),          # forward
            ("implicit_gemm", "grad_input", dict(stride=2, padding=1)),         # columns
            ("implicit_gemm", "grad_weight", dict(padding=1, groups=2))]


def _build(family, problem, runner, a, b):
    """The program of one family on operands ``a`` (dy or x) and ``b`` (w or dy)."""
    flags = dict(mma=False, tf32=False)
    if family == "implicit_gemm" and not implicit_grads.needs_columns(problem):
        if problem.op == "grad_input":
            return implicit_grads.grad_input_program(problem, a, b, runner, flags), ("dy", "w")
        return implicit_grads.grad_weight_program(problem, a, b, runner, flags), ("x", "dy")
    chunk_flags = flags if family == "implicit_gemm" else None
    if problem.op == "grad_input":
        dys = launch.operand_strides(problem, a, "y")
        return gradients.grad_input_program(problem, dys, runner, 1, chunk_flags), ("dy", "w")
    xs = launch.operand_strides(problem, a, "x")
    return gradients.grad_weight_program(problem, xs, runner, 1), ("x", "dy")


@pytest.mark.parametrize("family,op,geometry", FAMILIES, ids=str)
def test_a_cached_gradient_program_on_new_data_equals_its_first_run(dev, rng, family, op,
                                                                   geometry):
    """One program per problem and strides (memoised: the same object, chunked one image
    at a time here); executed on new data it computes what a freshly built program
    computes, and again on the first data exactly its first result."""
    g = geometry.get("groups", 1)
    problem = ConvProblem.create(x_shape=(2, 4, 7, 6), w_shape=(6, 4 // g, 3, 3), op=op,
                                 dtype=F32, **geometry)
    shapes = ((problem.y_shape, problem.w_shape) if op == "grad_input"
              else (problem.x_shape, problem.y_shape))
    a1, b1, a2, b2 = _data(dev, rng, *shapes, *shapes)
    runner = runners.runner_for(dev.name)

    def run(prog, names, a, b):
        bound = program.execute(prog, dev.xp, dict(zip(names, (a, b))))
        return dev.to_host(bound[prog.result]).copy()

    prog, names = _build(family, problem, runner, a1, b1)
    assert _build(family, problem, runner, a2, b2)[0] is prog and prog.launches
    assert prog.workspace_count == 1              # the columns, W^T or the forward output
    first = run(prog, names, a1, b1)
    second = run(prog, names, a2, b2)
    forget_launches()
    fresh, _ = _build(family, problem, runner, a2, b2)
    assert fresh is not prog
    np.testing.assert_array_equal(second, run(fresh, names, a2, b2))
    np.testing.assert_array_equal(run(prog, names, a1, b1), first)


# ------------------------------------------------------------ compiled calls
def _calls(dev, rng):
    """``{name: (call, launches)}``: the gradient calls, ``ConvOperator``'s and the
    derivative filters, small shapes; ``launches``: what a repeated call launches."""
    x, w, wg = _data(dev, rng, (2, 4, 7, 6), (6, 4, 3, 3), (6, 2, 3, 3))
    dy1, = _data(dev, rng, (2, 6, 7, 6))                  # padding 1, stride 1
    dy2, = _data(dev, rng, (2, 6, 4, 3))                  # padding 1, stride 2
    xt, wt = _data(dev, rng, (2, 6, 4, 3), (6, 2, 3, 3))  # conv_transpose, groups 2
    a, k, ga = _data(dev, rng, (9, 8), (3, 3), (11, 10))
    v = dev.to_dev(rng.standard_normal((9, 8, 7)).astype(F32))
    op = ConvOperator(k, (9, 8), "same", method="direct")
    cop = ConvOperator.from_conv(w, (2, 4, 7, 6), padding=1, method="implicit_gemm")
    vec, vec_y = _data(dev, rng, (72,), (2 * 6 * 7 * 6,))
    gi, gw = cupyconv.conv_grad_input, cupyconv.conv_grad_weight
    return {
        "conv_grad_input gemm": (gi, (dy1, w, x.shape), dict(padding=1, method="gemm"), 1),
        "conv_grad_input implicit_gemm": (gi, (dy1, wg, x.shape), dict(
            padding=1, groups=2, method="implicit_gemm"), 1),
        "conv_grad_input implicit_gemm, stride 2 (columns)": (gi, (dy2, w, x.shape), dict(
            stride=2, padding=1, method="implicit_gemm"), 2),
        "conv_grad_weight gemm": (gw, (x, dy2, w.shape), dict(stride=2, padding=1,
                                                              method="gemm"), 1),
        "conv_grad_weight implicit_gemm, groups 2": (gw, (x, dy1, wg.shape), dict(
            padding=1, groups=2, method="implicit_gemm"), 2),
        "conv_grad_weight gemm, float16 (widened by host steps)": (
            gw, (x.astype(np.float16), dy1.astype(np.float16), w.shape),
            dict(padding=1, method="gemm"), 1),
        "conv_grad_bias": (cupyconv.conv_grad_bias, (dy1,), {}, 0),
        "conv_transpose": (cupyconv.conv_transpose, (xt, wt), dict(
            stride=2, padding=1, groups=2, method="gemm"), 1),
        "conv_transpose, output_padding past the stride (a padding host step)": (
            cupyconv.conv_transpose, (xt, wt), dict(dilation=3, output_padding=2, groups=2,
                                                    method="gemm"), 1),
        "convolve_vjp direct": (convolve_vjp, (a, k, ga), dict(method="direct"), 2),
        "ConvOperator.matvec": (op.matvec, (vec,), {}, 1),
        "ConvOperator.rmatvec": (op.rmatvec, (vec,), {}, 1),
        "ConvOperator.from_conv rmatvec": (cop.rmatvec, (vec_y,), {}, 1),
        # the Gaussian sums: 3 axes of 3 passes, less the smoothing pass two terms share
        "ndimage.gaussian_gradient_magnitude": (ndimage.gaussian_gradient_magnitude,
                                                (v, 1.0), {}, 8),
        "ndimage.sobel": (ndimage.sobel, (v, 1), {}, 3),
        "ndimage.laplace": (ndimage.laplace, (v,), {}, 3),
        "ndimage.gaussian_laplace": (ndimage.gaussian_laplace, (v, 1.0), {}, 8),
    }


def _entries(fn, args, kwargs):
    """The cache entries of a call: ``convolve_vjp`` is two compiled calls (g1, g2)."""
    if fn is convolve_vjp:
        return [lookup(grad._vjp_part, *args, "full", None, False, kwargs["method"], second)
                for second in (False, True)]
    return [lookup(fn, *args, **kwargs)]


def _joined(dev, y):
    return dev.xp.concatenate([r.ravel() for r in y]) if isinstance(y, tuple) else y


def test_repeated_gradient_calls_replay_and_meet_the_budget(dev, rng):
    """A repeated float gradient, transpose, vjp, operator or derivative-filter call is a
    compiled call: 0 synchronisations, 0 copies, exactly its programs' launches and
    allocations (the result, the workspaces and pass buffers), and the normal path's
    result bit for bit."""
    for name, (fn, args, kwargs, launches) in _calls(dev, rng).items():
        with dev.scope():
            with normal_path():
                ref = dev.to_host(_joined(dev, fn(*args, **kwargs))).copy()
            first = _joined(dev, fn(*args, **kwargs))
            fn(*args, **kwargs)                    # the second call records and compiles
            entries = _entries(fn, args, kwargs)
            with program.accounting() as again:
                y = _joined(dev, fn(*args, **kwargs))
        assert all(isinstance(e, CompiledCall) for e in entries), (name, entries)
        np.testing.assert_array_equal(dev.to_host(first), ref, err_msg=name)
        np.testing.assert_array_equal(dev.to_host(y), ref, err_msg=name)
        assert again["launches"] == launches == sum(e.launches for e in entries), (name, again)
        assert again["allocations"] == sum(e.allocations for e in entries), (name, again)
        assert not any(again[k] for k in ("syncs", "d2h", "h2d")), (name, again)


def test_the_entries_are_compiled_calls(dev, rng):
    """What the budget test replays is the compiled call: the cache holds a
    :class:`CompiledCall` whose programs' launches and allocations are what a repeated
    call counts (gradient of the weights and the gradient magnitude)."""
    x, dy = _data(dev, rng, (2, 4, 7, 6), (2, 6, 7, 6))
    v = dev.to_dev(rng.standard_normal((6, 5, 4)).astype(F32))
    calls = [(cupyconv.conv_grad_weight, (x, dy, (6, 4, 3, 3)), dict(padding=1,
                                                                     method="implicit_gemm")),
             (ndimage.gaussian_gradient_magnitude, (v, 1.0), {})]
    for fn, args, kwargs in calls:
        with dev.scope():
            called_twice(fn, *args, **kwargs)
            entry = lookup(fn, *args, **kwargs)
            assert isinstance(entry, CompiledCall), entry
            with program.accounting() as again:
                fn(*args, **kwargs)
        assert again["launches"] == entry.launches
        assert again["allocations"] == entry.allocations
    # the magnitude: 3 axes of 3 passes less the smoothing pass two terms share, each
    # pass's result; the squares, sums and root are host steps on those buffers (no
    # allocation of their own)
    assert entry.launches == 8 and entry.allocations == 8


@st.composite
def _gradient_case(draw):
    """A small 2-D float32 gradient call: either gradient, gemm or implicit GEMM, stride
    1-2, padding 0-2 in any boundary mode, 1-2 groups, dy as it is or a view."""
    groups = draw(st.integers(1, 2))
    ks = tuple(draw(st.integers(1, 3)) for _ in range(2))
    return dict(op=draw(st.sampled_from(["grad_input", "grad_weight"])), groups=groups,
                c=groups * draw(st.integers(1, 2)), k=groups * draw(st.integers(1, 2)), ks=ks,
                spatial=tuple(draw(st.integers(k + 1, k + 5)) for k in ks),
                batch=draw(st.integers(1, 3)), stride=draw(st.integers(1, 2)),
                padding=draw(st.integers(0, 2)),
                padding_mode=draw(st.sampled_from(["constant", "reflect", "wrap", "edge"])),
                method=draw(st.sampled_from(["gemm", "implicit_gemm"])),
                view=draw(st.sampled_from(["as is", "flipped"])))


@settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_gradient_case(), seed=st.integers(0, 2**16))
def test_compiled_gradients_equal_the_normal_path(dev, case, seed):
    """Whatever the geometry and view, the first and the repeated gradient calls give the
    normal path's result bit for bit (compiled or not)."""
    rng = np.random.default_rng(seed)
    geometry = dict(stride=case["stride"], padding=case["padding"],
                    padding_mode=case["padding_mode"], groups=case["groups"],
                    method=case["method"])
    x_shape = (case["batch"], case["c"]) + case["spatial"]
    w_shape = (case["k"], case["c"] // case["groups"]) + case["ks"]
    problem = ConvProblem.create(x_shape=x_shape, w_shape=w_shape, dtype=F32,
                                 **{k: v for k, v in geometry.items() if k != "method"})
    x, w, dy = _data(dev, rng, x_shape, w_shape, problem.y_shape)
    if case["view"] == "flipped":
        dy = dy[..., ::-1]
    if case["op"] == "grad_input":
        def call():
            return cupyconv.conv_grad_input(dy, w, x_shape, **geometry)
    else:
        def call():
            return cupyconv.conv_grad_weight(x, dy, w_shape, **geometry)
    alternate_against_the_normal_path(dev, str(case), [call], rounds=2)


# ------------------------------------------------------------ invalidation
def test_alternating_gradient_keys_never_replay_a_stale_program(dev, rng):
    """Gradient calls that differ in one thing each (shapes, strides, views, the
    workspace limit that chunks the columns, precision), alternated three rounds: every
    result equals the normal path's."""
    xp = dev.xp
    x, w, dy = _data(dev, rng, (3, 4, 7, 6), (6, 4, 3, 3), (3, 6, 7, 6))
    dyt = xp.ascontiguousarray(dy.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)  # strides
    per_image = ConvProblem.create(x_shape=x.shape, w_shape=w.shape, padding=1,
                                   dtype=F32).column_bytes(1)

    def gi(d, m="gemm", **kw):
        return lambda: cupyconv.conv_grad_input(d, w, (d.shape[0],) + x.shape[1:], padding=1,
                                                method=m, **kw)

    def gw(a, d, m="gemm", **kw):
        return lambda: cupyconv.conv_grad_weight(a, d, w.shape, padding=1, method=m, **kw)

    def chunked(call):
        def run():
            config.workspace_limit = per_image          # one image per chunk
            try:
                return call()
            finally:
                config.workspace_limit = None
        return run

    def tf32(call):
        def run():
            config.precision = "tf32"
            try:
                return call()
            finally:
                config.precision = "highest"
        return run

    cases = [
        ("shapes", [gi(dy), gi(dy[:2]), gw(x, dy), gw(x[:1], dy[:1])]),
        ("strides", [gi(dy), gi(dyt), gw(x, dy, "implicit_gemm"), gw(x, dyt, "implicit_gemm")]),
        ("views", [gi(dy, "implicit_gemm"), gi(dy[::-1], "implicit_gemm"),
                   gw(x[:, :, ::-1], dy), gw(x, dy)]),
        ("workspace limit", [gi(dy), chunked(gi(dy)), gw(x, dy), chunked(gw(x, dy))]),
        ("precision", [gw(x, dy, "implicit_gemm"), tf32(gw(x, dy, "implicit_gemm"))]),
    ]
    for name, calls in cases:
        alternate_against_the_normal_path(dev, name, calls)


def test_a_chunked_program_runs_one_image_per_chunk(dev, rng):
    """Under a workspace limit of one image's columns the gradient's program has one
    GEMM and one col2vol launch per image (and replays them)."""
    x, w, dy = _data(dev, rng, (3, 4, 7, 6), (6, 4, 3, 3), (3, 6, 7, 6))
    per_image = ConvProblem.create(x_shape=x.shape, w_shape=w.shape, padding=1,
                                   dtype=F32).column_bytes(1)
    saved = config.workspace_limit
    config.workspace_limit = per_image
    try:
        with dev.scope():
            with normal_path():
                ref = dev.to_host(cupyconv.conv_grad_input(dy, w, x.shape, padding=1,
                                                           method="gemm"))
            cupyconv.conv_grad_input(dy, w, x.shape, padding=1, method="gemm")
            with program.accounting() as again:
                y = cupyconv.conv_grad_input(dy, w, x.shape, padding=1, method="gemm")
    finally:
        config.workspace_limit = saved
    np.testing.assert_array_equal(dev.to_host(y), ref)
    assert (again["launches"], again["library"]) == (3, 3)


def test_an_operator_keeps_its_kernel_and_reads_it_by_pointer(dev, rng):
    """``ConvOperator`` keeps its kernel as a constant of its compiled calls: values
    written into the kernel later are read by the next replay, as on the normal path."""
    k, v = _data(dev, rng, (3, 3), (72,))
    op = ConvOperator(k, (9, 8), "same", method="direct")
    called_twice(op.matvec, v)
    assert isinstance(lookup(op.matvec, v), CompiledCall)
    k[...] = 2 * k
    with dev.scope():
        with normal_path():
            ref = dev.to_host(op.matvec(v)).copy()
        np.testing.assert_array_equal(dev.to_host(op.matvec(v)), ref)


def test_a_derivative_filter_into_the_callers_array_takes_the_normal_path(dev, rng):
    """An ``output`` array of the caller: the passes write into it outside a program, so
    the call is not compiled, and new data in a repeated call give their own result."""
    v1, v2 = (dev.to_dev(rng.standard_normal((5, 4, 3)).astype(F32)) for _ in range(2))
    out = dev.xp.empty((5, 4, 3), F32)
    with dev.scope():
        with normal_path():
            refs = [dev.to_host(ndimage.gaussian_gradient_magnitude(v, 1.0)).copy()
                    for v in (v1, v2)]
        for _ in range(2):
            for v, ref in zip((v1, v2), refs):
                ndimage.gaussian_gradient_magnitude(v, 1.0, output=out)
                np.testing.assert_array_equal(dev.to_host(out), ref)
        assert not isinstance(lookup(ndimage.gaussian_gradient_magnitude, v1, 1.0,
                                     output=out), CompiledCall)
