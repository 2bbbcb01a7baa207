"""The NumPy backend's ``gemm`` (``cupyconv.backends.numpy.gemm``): the column
buffer is chunked to the workspace limit for every operation and the result
does not depend on the chunking; the backend's workspace answers.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import cupyconv
from cupyconv.backends.base import OutOfMemoryError
from cupyconv.backends.numpy import NumpyBackend, gemm, gemm_grid
from cupyconv.core.problem import ConvProblem, Operands
from helpers import ref_conv, small_ints

#: (x shape, w shape, geometry): multi-channel, grouped, strided 3-D, and
#: output extents 7/13 that do not divide into the chunk runs.
CHUNK_CASES = [
    ((2, 4, 7, 13), (5, 4, 3, 2), dict(padding=1)),
    ((3, 6, 9, 7), (4, 3, 2, 2), dict(groups=2, stride=2)),
    ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), dict(dilation=(1, 2, 1))),
]


def _problem(x, w, op="forward", **geo):
    return ConvProblem.create(x_shape=x.shape, w_shape=w.shape, dtype=x.dtype, op=op, **geo)


#: ``gemm.ROWS_MAX_CHANNELS`` for each column layout: channels-last (positions as rows,
#: for every ungrouped case here) and (taps * C/G, positions) (for every case).
ORIENTATIONS = {"rows": 1 << 30, "columns": 0}


@pytest.mark.parametrize("x_shape,w_shape,geo", CHUNK_CASES)
@pytest.mark.parametrize("positions", [1, 3, 7, 50])
@pytest.mark.parametrize("orientation", list(ORIENTATIONS))
def test_gemm_chunks_under_the_limit(x_shape, w_shape, geo, positions, orientation, rng,
                                     monkeypatch):
    """Exact (small integers) in either column layout, blocked or whole, and the
    workspace under the limit."""
    monkeypatch.setattr(gemm, "ROWS_MAX_CHANNELS", ORIENTATIONS[orientation])
    x = small_ints(rng, x_shape, np.float64)
    w = small_ints(rng, w_shape, np.float64)
    problem = _problem(x, w, **geo)
    ops = Operands(activation=x, filter=w)
    per_position = problem.dtype.itemsize * problem.groups * problem.gemm_k
    assert gemm.position_bytes(problem) == per_position
    limit = positions * per_position
    unlimited = {}
    want = gemm.run(problem, ops, problem.column_bytes(), unlimited)
    # the whole buffer, or one block per core in flight (each under half the limit)
    assert 0 < unlimited["peak_workspace"] <= problem.column_bytes()
    stats = {}
    got = gemm.run(problem, ops, limit, stats)
    assert 0 < stats["peak_workspace"] <= limit
    if limit < problem.column_bytes():
        assert stats["peak_workspace"] < unlimited["peak_workspace"]   # it did chunk
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, ref_conv(x, w, **geo))
    # through the public API as well
    np.testing.assert_array_equal(
        cupyconv.conv(x, w, method="gemm", workspace_limit=limit, **geo), want)


def test_gemm_limit_below_one_position_is_a_memory_error(rng):
    x, w = small_ints(rng, (1, 4, 6), np.float64), small_ints(rng, (2, 4, 3), np.float64)
    problem = _problem(x, w)
    with pytest.raises(OutOfMemoryError, match=r"workspace_limit=8 bytes cannot hold the "
                                                r"columns of one output position \(96 bytes\)"):
        gemm.run(problem, Operands(activation=x, filter=w), 8, {})


@pytest.mark.parametrize("x_shape,w_shape,geo", CHUNK_CASES)
@pytest.mark.parametrize("op", ["grad_input", "grad_weight"])
@pytest.mark.parametrize("positions", [1, 5, 50])
@pytest.mark.parametrize("orientation", list(ORIENTATIONS))
def test_gradients_block_under_the_limit(x_shape, w_shape, geo, op, positions, orientation,
                                         rng, monkeypatch):
    """Blocks of one output position up to several images: the same gradients, bitwise
    (blocks are summed in a fixed order), under the limit, in either column layout;
    below one position's columns a memory error that says so."""
    monkeypatch.setattr(gemm, "ROWS_MAX_CHANNELS", ORIENTATIONS[orientation])
    x = small_ints(rng, x_shape, np.float64)
    w = small_ints(rng, w_shape, np.float64)
    problem = _problem(x, w, op=op, **geo)
    dy = small_ints(rng, (problem.batch, problem.out_channels) + problem.out_shape, np.float64)
    ops = Operands(activation=x, filter=w, output=dy)
    least = gemm.min_workspace_bytes(problem)
    whole, blocked = {}, {}
    want = gemm.run(problem, ops, 2**30, whole)
    got = gemm.run(problem, ops, positions * least, blocked)
    assert 0 < blocked["peak_workspace"] <= positions * least
    np.testing.assert_array_equal(got, want)            # small integers: exact either way
    # exact adjoints of the forward on small integers: <conv(x), dy> = <x, dx> = <w, dw>
    fwd = float(np.vdot(ref_conv(x, w, **geo), dy))
    assert fwd == float(np.vdot(x if op == "grad_input" else w, got))
    with pytest.raises(OutOfMemoryError, match=r"cannot hold the columns of one output"):
        gemm.run(problem, ops, least - 1, {})


def test_workspace_answers(monkeypatch):
    """gemm: the whole buffer when it fits, else the limit (blocked), never below
    one position; fft: its spectra; the tap loop: nothing."""
    be = NumpyBackend()
    p = ConvProblem.create(x_shape=(4, 6, 10, 10), w_shape=(8, 3, 3, 3), groups=2, padding=1,
                           dtype=np.float32)
    position, image, whole = 4 * 2 * 3 * 9, p.column_bytes(1), p.column_bytes()
    assert image == 4 * 2 * (3 * 9) * 100 and whole == 4 * image
    for name in ("direct", "implicit_gemm"):
        assert be.workspace_bytes(p, name, 1) == 0 and be.min_workspace_bytes(p, name) == 0
    assert be.workspace_bytes(p, "gemm", 10 * whole) == whole
    assert be.workspace_bytes(p, "gemm", image + 5) == image + 5
    assert be.workspace_bytes(p, "gemm", 1) == position
    assert be.min_workspace_bytes(p, "gemm") == position
    g = p.with_(op="grad_weight")
    assert be.min_workspace_bytes(g, "gemm") == position
    assert be.workspace_bytes(g, "gemm", 1) == position
    # a stride-1 input gradient runs as the forward problem of the transposed kernel:
    # one position's columns hold K/G * taps per group
    gi = p.with_(op="grad_input")
    assert be.min_workspace_bytes(gi, "gemm") == 4 * 2 * (8 // 2) * 9
    assert be.workspace_bytes(p, "fft") > 0 and be.min_workspace_bytes(p, "fft") == \
        be.workspace_bytes(p, "fft")
    monkeypatch.setattr(be, "default_workspace_limit", lambda: 3 * image)
    assert be.workspace_bytes(p, "gemm") == 3 * image           # no limit: the default one


def test_default_limit_chunks_the_column_buffer():
    """Without a workspace_limit the CPU limit is half the host's memory, but the column
    buffer still comes in blocks of about CHUNK_BYTES, one per core in flight (not one
    huge buffer)."""
    from cupyconv.backends.numpy.threads import workers
    from cupyconv.dispatch import backend_for, run
    x = np.ones((1, 1, 1024, 1024))
    w = np.ones((1, 1, 5, 5))
    p = ConvProblem.create(x_shape=x.shape, w_shape=w.shape, padding=2)
    assert p.column_bytes() > 2 * gemm.CHUNK_BYTES
    stats = {}
    y, name = run(p, Operands(activation=x, filter=w), backend_for(np), method="gemm",
                  stats=stats)
    assert name == "gemm" and 0 < stats["peak_workspace"] <= gemm.CHUNK_BYTES * workers()
    assert y[0, 0, 5, 5] == 25


#: (x shape, padding, cval): the channels-last padded input's edge cases: asymmetric
#: padding on every axis, one side zero, a nonzero cval, one image row (one piece per
#: image), and no padding (the plain transpose).
PADDED_CASES = [
    ((2, 3, 5, 4), ((2, 1), (0, 3)), 0.0),
    ((1, 2, 4, 3, 2), ((1, 1), (2, 0), (0, 1)), -2.5),
    ((3, 1, 1, 6), ((1, 2), (1, 1)), 7.0),
    ((2, 2, 6), ((0, 0),), 0.0),
    ((1, 6, 3, 5), ((1, 1), (1, 2)), 1.5),
]
#: (channels copied one at a time up to, faces share from which the whole buffer is
#: filled): the whole transpose and face by face, one channel at a time and the whole
#: buffer filled, then the defaults.
PAD_WAYS = [(0, 2.0), (1 << 10, 0.0), (gemm.PAD_BY_CHANNEL, gemm_grid.FACES_FILL_SHARE)]


@pytest.mark.parametrize("x_shape,padding,cval", PADDED_CASES)
@pytest.mark.parametrize("piece", [1, 8, 1 << 18])
@pytest.mark.parametrize("by_channel,fill_share", PAD_WAYS)
def test_padded_last_is_numpys_pad_channels_last(x_shape, padding, cval, piece, by_channel,
                                                 fill_share, rng, monkeypatch):
    """:func:`gemm.padded_last` is ``numpy.pad`` then the channels moved last, whether its
    copy runs as one piece or as pieces of one row (on the pool), as one transpose or one
    channel at a time, the faces written one by one or the whole buffer filled first."""
    monkeypatch.setattr(gemm, "PAD_PIECE", piece)
    monkeypatch.setattr(gemm, "PAD_BY_CHANNEL", by_channel)
    monkeypatch.setattr(gemm_grid, "FACES_FILL_SHARE", fill_share)
    x = rng.standard_normal(x_shape)
    w_shape = (2, x_shape[1]) + (1,) * (len(x_shape) - 2)
    problem = ConvProblem.create(x_shape=x_shape, w_shape=w_shape, padding=padding,
                                 padding_mode="constant", cval=cval, dtype=x.dtype)
    want = np.pad(x, ((0, 0), (0, 0)) + padding, constant_values=cval)
    got = gemm.padded_last(problem, x)
    assert got.flags.c_contiguous
    np.testing.assert_array_equal(got, np.moveaxis(want, 1, -1))


#: (x shape, w shape, geometry) whose forward builds its columns on the extended grid
#: (:func:`gemm_grid.flat_axes`): few channels, a stride-1 trailing box; asymmetric and
#: boundary-mode padding, a non-zero cval, a strided lead axis, 2-D to 5-D.
FLAT_CASES = [
    ((2, 2, 6, 5, 7, 6), (3, 2, 3, 3, 3, 3), dict(padding=1)),
    ((1, 3, 5, 9, 8), (2, 3, 3, 2, 3), dict(padding=((1, 0), (2, 1), (0, 2)), cval=2.0)),
    ((2, 1, 7, 6, 9), (4, 1, 3, 3, 3), dict(padding=1, padding_mode="reflect",
                                              stride=(2, 1, 1))),
    ((3, 2, 11, 12), (2, 2, 3, 3), dict(padding=((2, 2), (1, 1)), dilation=(2, 1))),
    ((1, 1, 3, 3, 4, 6, 8), (2, 1, 2, 2, 2, 2, 3), dict(padding=1)),
]


def _unfolded(monkeypatch):
    """The extended grid's columns with every tap in them (the taps folded into the
    GEMM's rows: test_numpy_gemm_fold.py)."""
    monkeypatch.setattr(gemm, "fold_plan", lambda problem, limit: (0, 0))


def _flat_limit(problem, rows):
    """``(column bytes, limit)``: the limit holding ``rows`` extended lead rows (whole
    when None) of a problem :func:`gemm_grid.flat_axes` takes."""
    e = gemm_grid.flat_axes(problem)
    assert e >= 2
    whole = problem.column_bytes()
    return whole, whole if rows is None else rows * gemm_grid.flat_lead_bytes(problem, e)


@pytest.mark.parametrize("x_shape,w_shape,geo", FLAT_CASES)
@pytest.mark.parametrize("rows", [1, 3, None])
@pytest.mark.parametrize("fill_share", [0.0, 2.0])
def test_extended_grid_forward_is_exact(x_shape, w_shape, geo, rows, fill_share, rng,
                                        monkeypatch):
    """The extended-grid forward equals the reference exactly (small integers), in
    blocks of one or three lead rows or whole, its workspace under the limit and the
    column bytes; the padded input's faces written one by one or the whole buffer
    filled first."""
    monkeypatch.setattr(gemm_grid, "FACES_FILL_SHARE", fill_share)
    ran = []
    flat = gemm.flat_forward
    monkeypatch.setattr(gemm, "flat_forward", lambda *a: ran.append(1) or flat(*a))
    _unfolded(monkeypatch)
    x = small_ints(rng, x_shape, np.float64)
    w = small_ints(rng, w_shape, np.float64)
    problem = _problem(x, w, **geo)
    whole, limit = _flat_limit(problem, rows)
    stats = {}
    got = gemm.run(problem, Operands(activation=x, filter=w), limit, stats)
    assert ran
    assert 0 < stats["peak_workspace"] <= min(limit, whole)
    np.testing.assert_array_equal(got, ref_conv(x, w, **geo))
    np.testing.assert_array_equal(
        cupyconv.conv(x, w, method="gemm", workspace_limit=limit, **geo), got)


@pytest.mark.parametrize("x_shape,w_shape,geo", FLAT_CASES[:2])
def test_extended_grid_rows_past_the_block_target_run_one_per_block(x_shape, w_shape, geo,
                                                                     rng, monkeypatch):
    """An extended lead row larger than the bytes a block aims at (``gemm.CHUNK_BYTES``,
    set below one row here; the depthwise 8 x 64 x 56^2 float32 layer's row is 7.5 MB
    against 2 MiB) is the least block: the forward runs one row per block under the
    default limit instead of raising a memory error."""
    monkeypatch.setattr(gemm, "CHUNK_BYTES", 64)
    _unfolded(monkeypatch)
    x = small_ints(rng, x_shape, np.float64)
    w = small_ints(rng, w_shape, np.float64)
    problem = _problem(x, w, **geo)
    row = gemm_grid.flat_lead_bytes(problem, gemm_grid.flat_axes(problem))
    assert row > gemm.CHUNK_BYTES
    stats = {}
    got = gemm.run(problem, Operands(activation=x, filter=w), problem.column_bytes(), stats)
    assert stats["peak_workspace"] <= row * 2          # a row per block, per lane
    np.testing.assert_array_equal(got, ref_conv(x, w, **geo))


#: Stride-1 input gradients with a boundary mode: 2-D to 4-D, groups, dilation,
#: asymmetric padding wider than some kernels' reach, padding larger than an axis
#: (reflected more than once).
BOUNDARY_CASES = [
    ((2, 3, 7, 9), (4, 3, 3, 3), dict(padding=1)),
    ((1, 4, 6, 7, 9), (2, 2, 3, 2, 3), dict(padding=((2, 1), (0, 1), (1, 3)), groups=2,
                                           dilation=(1, 2, 1))),
    ((2, 2, 5, 6, 5, 6), (3, 2, 3, 3, 3, 3), dict(padding=1)),
    ((1, 2, 3, 8), (2, 2, 3, 3), dict(padding=((4, 2), (1, 1)))),
]


@pytest.mark.parametrize("x_shape,w_shape,geo", BOUNDARY_CASES)
@pytest.mark.parametrize("mode", ["reflect", "symmetric", "wrap", "edge"])
def test_stride_one_boundary_input_gradient_is_the_folded_forward(x_shape, w_shape, geo,
                                                                  mode, rng, monkeypatch):
    """A stride-1 input gradient with a boundary mode runs as the forward over the whole
    padded input, folded back: on small integers it equals the col2im scatter bitwise and
    is the forward's exact adjoint."""
    x = small_ints(rng, x_shape, np.float64)
    w = small_ints(rng, w_shape, np.float64)
    geo = dict(geo, padding_mode=mode)
    problem = _problem(x, w, op="grad_input", **geo)
    assert gemm.forward_applies(problem) and gemm.transposed(problem).fold
    dy = small_ints(rng, (problem.batch, problem.out_channels) + problem.out_shape, np.float64)
    ops = Operands(activation=x, filter=w, output=dy)
    got = gemm.run(problem, ops, problem.column_bytes(), {})
    assert float(np.vdot(ref_conv(x, w, **geo), dy)) == float(np.vdot(x, got))
    monkeypatch.setattr(gemm, "forward_applies", lambda problem: False)
    monkeypatch.setattr(gemm, "grid_axes", lambda problem, limit: 0)
    np.testing.assert_array_equal(got, gemm.run(problem, ops, problem.column_bytes(), {}))


#: (x shape, w shape, geometry) whose col2im input gradient runs on the stride's phase
#: grids (:func:`gemm_grid.scatter_axes`): strides 2 and 3, dilation, asymmetric and boundary-
#: mode padding, 3-D and 4-D.
PHASE_CASES = [
    ((2, 2, 9, 8, 11, 10), (3, 2, 3, 3, 3, 3), dict(stride=2, padding=1)),
    ((1, 3, 7, 12, 14), (2, 3, 2, 3, 3), dict(stride=(1, 2, 3), dilation=(1, 2, 2),
                                              padding=((0, 1), (2, 1), (1, 3)))),
    ((2, 2, 6, 9, 8), (2, 2, 3, 3, 3), dict(stride=(1, 2, 1), padding=1,
                                            padding_mode="reflect")),
    ((1, 4, 6, 7, 13), (4, 2, 3, 2, 3), dict(stride=(2, 2, 2), padding=2, groups=2,
                                             padding_mode="wrap")),
    ((1, 2, 9, 10, 7), (2, 2, 3, 3, 3), dict(stride=2, padding=((3, 0), (2, 3), (1, 4)))),
]


@pytest.mark.parametrize("x_shape,w_shape,geo", PHASE_CASES)
@pytest.mark.parametrize("rows", [1, 3, None])
@pytest.mark.parametrize("lanes", ["lead rows", "one core", "many taps"])
def test_phase_grid_input_gradient_is_the_tap_loops(x_shape, w_shape, geo, rows, lanes,
                                                    rng, monkeypatch):
    """On small integers the phase-grid col2im equals the per-tap scatter bitwise,
    blocked or whole, under the limit, and is the forward's exact adjoint: by lead rows
    on two cores, and where whole images' grids add tap by tap (``TAP_BY_TAP_WASTE``) on
    one core or, with ``WHOLE_MIN_TAPS`` taps, on two."""
    monkeypatch.setattr(gemm_grid, "workers", lambda: 1 if lanes == "one core" else 2)
    monkeypatch.setattr(gemm_grid, "WHOLE_MIN_TAPS", 1 if lanes == "many taps" else 10**9)
    x = small_ints(rng, x_shape, np.float64)
    w = small_ints(rng, w_shape, np.float64)
    problem = _problem(x, w, op="grad_input", **geo)
    dy = small_ints(rng, (problem.batch, problem.out_channels) + problem.out_shape, np.float64)
    ops = Operands(activation=x, filter=w, output=dy)
    e = gemm_grid.scatter_axes(problem)
    assert e >= 2 and not gemm.forward_applies(problem)
    whole = problem.column_bytes()
    row = whole // (problem.batch * math.prod(problem.out_shape[:problem.ndim - e]))
    limit = whole if rows is None else rows * 2 * row      # a lead row's extended columns
    stats = {}
    got = gemm.run(problem, ops, limit, stats)
    assert 0 < stats["peak_workspace"] <= limit
    monkeypatch.setattr(gemm, "grid_axes", lambda problem, limit: 0)
    np.testing.assert_array_equal(got, gemm.run(problem, ops, limit, {}))
    assert float(np.vdot(ref_conv(x, w, **geo), dy)) == float(np.vdot(x, got))


#: Strided input gradients of at least ``WHOLE_MIN_TAPS`` taps whose whole phase grids
#: stay within ``WHOLE_MAX_WASTE``: 3-D, reflect and asymmetric padding, the 4-D 14^4 s2
#: layer of ``benchmarks/torch_layers.py`` with fewer channels; and two whose lead rows
#: would waste too much for the phase grids' lead-row path (``scatter_axes`` 0: the
#: col2im path before), 4-D and 5-D, one with groups; a 6-D one of 729 taps, up to
#: ``WHOLE_MANY_MAX_WASTE``.
WHOLE_CASES = [PHASE_CASES[2], PHASE_CASES[4],
               ((1, 2, 14, 14, 14, 14), (3, 2, 3, 3, 3, 3), dict(stride=2, padding=1)),
               ((2, 2, 10, 10, 10, 10), (3, 2, 3, 3, 3, 3), dict(stride=2, padding=1)),
               ((1, 4, 9, 9, 9, 9, 9), (2, 2, 3, 3, 3, 3, 3),
                dict(stride=2, padding=1, groups=2)),
               ((1, 2) + (6,) * 6, (2, 2) + (3,) * 6, dict(stride=2, padding=1))]


@pytest.mark.parametrize("x_shape,w_shape,geo", WHOLE_CASES)
def test_whole_image_input_gradient_is_the_tap_loops(x_shape, w_shape, geo, rng,
                                                     monkeypatch):
    """On small integers the whole images' tap-by-tap adds equal the per-tap scatter
    bitwise and are the forward's exact adjoint, on two cores."""
    monkeypatch.setattr(gemm_grid, "workers", lambda: 2)
    x = small_ints(rng, x_shape, np.float64)
    w = small_ints(rng, w_shape, np.float64)
    problem = _problem(x, w, op="grad_input", **geo)
    assert gemm_grid.grid_axes(problem, problem.column_bytes()) == problem.ndim
    assert gemm_grid.whole_images(problem, problem.column_bytes())
    dy = small_ints(rng, (problem.batch, problem.out_channels) + problem.out_shape, np.float64)
    ops = Operands(activation=x, filter=w, output=dy)
    got = gemm.run(problem, ops, problem.column_bytes(), {})
    monkeypatch.setattr(gemm, "grid_axes", lambda problem, limit: 0)
    np.testing.assert_array_equal(got, gemm.run(problem, ops, problem.column_bytes(), {}))
    assert float(np.vdot(ref_conv(x, w, **geo), dy)) == float(np.vdot(x, got))


@pytest.mark.parametrize("shapes,dtype", [
    (((2, 4) + (9,) * 5, (4, 4) + (3,) * 5), np.float64),
    (((2, 2) + (6,) * 6, (2, 2) + (3,) * 6), np.float32),
    (((2, 2) + (6,) * 6, (2, 2) + (3,) * 6), np.float64)], ids=["5-D", "6-D", "6-D f64"])
def test_the_whole_image_input_gradient_is_priced_below_the_fft(shapes, dtype, monkeypatch):
    """The cost model counts the whole images' adds once per tap (not per tap and column
    block), as contiguous slices, and no column copy: stride 2, one core, gemm (whole
    images) prices below the FFT where it runs 3-6x faster (5-D 9^5 float64 11-17 ms
    against 59-68, 6-D 6^6 8-11 against 20-30; docs/benchmarks/repeat_calls.md)."""
    from cupyconv.backends.numpy import cost
    monkeypatch.setattr(cost, "workers", lambda: 1)
    monkeypatch.setattr(gemm_grid, "workers", lambda: 1)
    problem = ConvProblem.create(x_shape=shapes[0], w_shape=shapes[1], dtype=dtype,
                                 op="grad_input", stride=2, padding=1)
    assert gemm_grid.whole_images(problem, problem.column_bytes())
    assert cost.predict(problem, "gemm") < cost.predict(problem, "fft")


@pytest.mark.parametrize("x_shape,w_shape,geo", WHOLE_CASES)
def test_whole_image_input_gradient_has_the_same_bits_on_any_cores(x_shape, w_shape, geo,
                                                                   rng, monkeypatch):
    """A kernel of ``WHOLE_MIN_TAPS`` taps adds tap by tap over whole images on one lane
    whatever the cores: random floats give the same bits on one core and on four."""
    x = rng.standard_normal(x_shape)
    w = rng.standard_normal(w_shape)
    problem = _problem(x, w, op="grad_input", **geo)
    assert math.prod(w_shape[2:]) >= gemm_grid.WHOLE_MIN_TAPS
    assert gemm_grid.whole_images(problem, problem.column_bytes())
    dy = rng.standard_normal((problem.batch, problem.out_channels) + problem.out_shape)
    ops = Operands(activation=x, filter=w, output=dy)
    got = {}
    for cores in (1, 4):
        monkeypatch.setattr(gemm_grid, "workers", lambda: cores)
        got[cores] = gemm.run(problem, ops, problem.column_bytes(), {})
    np.testing.assert_array_equal(got[1], got[4])


def test_phase_grid_input_gradient_with_non_finite_weights_is_the_tap_loops(rng,
                                                                          monkeypatch):
    """A non-finite weight gives the per-tap scatter's result (the extended positions'
    zeros would meet it, and wrapped padding would fold their NaN onto the input), NaN
    and infinity where that has them."""
    x_shape, w_shape, geo = PHASE_CASES[3]
    w = small_ints(rng, w_shape, np.float64)
    w[0, 1, 1, 1, 2] = np.inf
    problem = _problem(np.empty(x_shape), w, op="grad_input", **geo)
    dy = small_ints(rng, (problem.batch, problem.out_channels) + problem.out_shape, np.float64)
    with np.errstate(invalid="ignore"):             # infinity times zero in the GEMM
        got = gemm.run(problem, Operands(filter=w, output=dy), 2**30, {})
        monkeypatch.setattr(gemm, "grid_axes", lambda problem, limit: 0)
        want = gemm.run(problem, Operands(filter=w, output=dy), 2**30, {})
    np.testing.assert_array_equal(got, want)
    assert not np.isfinite(got).all()


@pytest.mark.parametrize("x_shape,w_shape,geo", FLAT_CASES)
@pytest.mark.parametrize("rows", [1, None])
def test_extended_grid_weight_gradient_is_the_column_path(x_shape, w_shape, geo, rows, rng,
                                                          monkeypatch):
    """float32 on small integers (exact): the extended-grid weight gradient equals the
    channels-last columns' bitwise, blocked or whole, under the limit; a non-finite input
    takes the channels-last path (its extended positions would meet ``dy``'s zeros)."""
    ran = []
    flat = gemm.flat_grad_weight
    monkeypatch.setattr(gemm, "flat_grad_weight", lambda *a: ran.append(1) or flat(*a))
    _unfolded(monkeypatch)
    x = small_ints(rng, x_shape, np.float32)
    w = small_ints(rng, w_shape, np.float32)
    problem = _problem(x, w, op="grad_weight", **geo)
    dy = small_ints(rng, (problem.batch, problem.out_channels) + problem.out_shape, np.float32)
    whole, limit = _flat_limit(problem, rows)
    stats = {}
    got = gemm.run(problem, Operands(activation=x, output=dy), limit, stats)
    assert ran and 0 < stats["peak_workspace"] <= min(limit, whole)
    first = x[(0,) * x.ndim].copy()
    x[(0,) * x.ndim] = np.nan
    with np.errstate(invalid="ignore"):
        nan_got = gemm.run(problem, Operands(activation=x, output=dy), limit, {})
        monkeypatch.setattr(gemm, "grid_axes", lambda problem, limit: 0)
        nan_want = gemm.run(problem, Operands(activation=x, output=dy), limit, {})
        x[(0,) * x.ndim] = first
        want = gemm.run(problem, Operands(activation=x, output=dy), limit, {})
    assert len(ran) == 1
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(nan_got, nan_want)
