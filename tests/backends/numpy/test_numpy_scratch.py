"""The NumPy backend's temporaries outlive a call (``threads.Scratch``,
``arrays.reused``): each thread gets its buffers back on its next call, and no result is
ever one of them.

Every gemm path that draws on them (folded, extended-grid and channels-last columns,
grouped columns, the phase-grid and col2im input gradients, the folded and extended-grid
weight gradients, the three with a folded strided last axis) and the depthwise tap loop
run one call, then a call with other data of the same shapes (which overwrites the kept
buffers): the first result must be unchanged; then the first call again, which must
repeat it bit for bit, and the forward must equal the tap-loop reference.  float32 small
integers keep every sum exact.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import cupyconv
from cupyconv.backends.numpy import gemm, threads
from cupyconv.backends.numpy.threads import Scratch
from helpers import ref_conv, small_ints

#: (name, op, x shape, w shape, geometry, the gemm function that runs it, or None)
PATHS = [
    ("folded forward", "forward", (2, 4, 5, 6, 7, 8), (8, 4, 3, 3, 3, 3), dict(padding=1),
     "folded_forward"),
    ("extended-grid forward", "forward", (2, 2, 6, 7, 9), (4, 2, 3, 3, 3), dict(padding=1),
     "flat_forward"),
    ("channels-last columns", "forward", (2, 16, 9, 9), (8, 16, 3, 3), dict(padding=1),
     "columns"),
    ("grouped columns", "forward", (1, 32, 8, 8), (4, 16, 3, 3), dict(padding=1, groups=2),
     "columns"),
    ("strided channels-last columns", "forward", (2, 3, 7, 8, 9), (4, 3, 3, 3, 3),
     dict(padding=1, stride=(2, 2, 1)), "columns"),
    ("stride-folded forward", "forward", (2, 3, 7, 8, 9), (4, 3, 3, 3, 3),
     dict(padding=1, stride=2), "stride_folded_forward"),
    ("stride-folded input gradient", "grad_input", (2, 3, 7, 8, 9), (4, 3, 3, 3, 3),
     dict(padding=1, stride=2), "stride_folded_grad_input"),
    ("stride-folded weight gradient", "grad_weight", (2, 3, 7, 8, 9), (4, 3, 3, 3, 3),
     dict(padding=1, stride=2), "stride_folded_grad_weight"),
    ("folded input gradient", "grad_input", (2, 4, 5, 6, 7, 8), (8, 4, 3, 3, 3, 3),
     dict(padding=1), "folded_forward"),
    ("phase-grid input gradient", "grad_input", (2, 2, 9, 8, 11, 10), (3, 2, 3, 3, 3, 3),
     dict(padding=1, stride=(2, 2, 2, 1)), "phase_grad_input"),
    ("col2im input gradient", "grad_input", (2, 16, 9, 9), (8, 16, 3, 3),
     dict(padding=1, stride=2), None),
    ("folded weight gradient", "grad_weight", (2, 4, 5, 6, 7, 8), (8, 4, 3, 3, 3, 3),
     dict(padding=1), "folded_grad_weight"),
    ("extended-grid weight gradient", "grad_weight", (2, 2, 6, 7, 9), (4, 2, 3, 3, 3),
     dict(padding=1), "flat_grad_weight"),
    ("channels-last weight gradient", "grad_weight", (2, 3, 7, 8, 9), (4, 3, 3, 3, 3),
     dict(padding=1, stride=(2, 2, 1)), "columns"),
    ("depthwise tap loop", "forward", (2, 6, 9, 10), (6, 1, 3, 3),
     dict(padding=1, groups=6), None),
]


def _call(op, x, w, dy, geo):
    method = "direct" if geo.get("groups", 1) == x.shape[1] == w.shape[0] else "gemm"
    if op == "forward":
        return cupyconv.conv(x, w, method=method, **geo)
    if op == "grad_input":
        return cupyconv.conv_grad_input(dy, w, x.shape, method=method, **geo)
    return cupyconv.conv_grad_weight(x, dy, w.shape, method=method, **geo)


@pytest.mark.parametrize("name,op,x_shape,w_shape,geo,path", PATHS,
                         ids=[p[0] for p in PATHS])
def test_a_result_survives_the_next_call(name, op, x_shape, w_shape, geo, path, rng,
                                         monkeypatch):
    monkeypatch.setattr(threads, "REUSE_FROM_BYTES", 0)     # small buffers kept too
    ran = []
    if path is not None:
        real = getattr(gemm, path)
        monkeypatch.setattr(gemm, path, lambda *a, **k: ran.append(path) or real(*a, **k))

    def operands():
        x = small_ints(rng, x_shape, np.float32)
        w = small_ints(rng, w_shape, np.float32)
        dy = small_ints(rng, ref_conv(x, w, **geo).shape, np.float32)
        return x, w, dy

    first, other = operands(), operands()
    with cupyconv.use_backend("numpy"):
        got = _call(op, *first, geo)
        kept = got.copy()
        between = _call(op, *other, geo)
        np.testing.assert_array_equal(got, kept)
        again = _call(op, *first, geo)
    assert path is None or path in ran, (path, ran)
    assert not (between == kept).all()
    np.testing.assert_array_equal(again, kept)
    if op == "forward":
        np.testing.assert_array_equal(got, ref_conv(first[0], first[1], **geo))


def _shares(a, b):
    return np.shares_memory(a, b)


def test_unfilled_scratch_comes_back_to_its_thread_until_caches_are_cleared():
    """A later call's ``Scratch`` on the same thread gets the same memory under a name
    (a shorter request its leading rows, a longer one a new buffer) for buffers of
    ``REUSE_FROM_BYTES`` or more; another thread, a smaller buffer, a filled one and
    ``clear_caches`` get their own."""
    row = threads.REUSE_FROM_BYTES // 4 // 2            # float32: two rows are the least

    def take(rows, width=row, dtype=np.float32, name="test columns", **kw):
        return Scratch().take(name, (rows, width), dtype, **kw)

    first = take(6)
    shorter = take(4)
    assert _shares(first, shorter) and shorter.shape == (4, row)
    assert _shares(first, take(2))
    assert not _shares(first, take(6, row - 1))
    assert not _shares(first, take(6, dtype=np.float64))
    longer = take(9)
    assert longer.shape == (9, row) and not _shares(first, longer)
    assert _shares(longer, take(3))
    assert not _shares(take(1), take(1))                # below the bound: fresh each time

    other = []
    t = threading.Thread(target=lambda: other.append(take(9)))
    t.start()
    t.join()
    assert not _shares(longer, other[0])

    filled = take(3, name="test padded", fill=7.0)
    assert (filled == 7).all()
    filled[...] = 0
    assert (take(3, name="test padded", fill=7.0) == 7).all()

    cupyconv.clear_caches()
    assert not _shares(longer, take(9))
