"""PyTorch as the oracle of ``cupyconv.torch``: reference calls, tolerances, strategies."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from hypothesis import assume, strategies as st

#: Unit roundoff per dtype.  A sum of K products is within gamma_K = K*u/(1-K*u) of
#: (|x| conv |w|) elementwise (Higham), so the normwise error relative to the
#: absolute-value convolution's norm is too; C = 4 covers the product roundings and
#: the float16/bfloat16 operands' one final rounding on top of a float32 sum.
UNIT = {torch.float64: 2.0 ** -53, torch.float32: 2.0 ** -24,
        torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}
C = 4.0
TORCH_MODES = {"zeros": "constant", "reflect": "reflect", "replicate": "replicate",
               "circular": "circular"}


def tolerance(dtype, terms):
    """Normwise bound ``C * gamma_K`` for sums of ``terms`` products in ``dtype``
    (float16/bfloat16 accumulate in float32: their bound is one rounding of the result,
    plus the float32 sum's)."""
    u = UNIT[dtype]
    if dtype in (torch.float16, torch.bfloat16):
        return C * (u + terms * UNIT[torch.float32])
    return C * terms * u / (1 - terms * u)


def assert_close(y, ref, scale, dtype, terms, what=""):
    """``||y - ref|| <= tolerance * || scale ||`` with scale the |x| conv |w| analogue."""
    assert y.shape == ref.shape, (what, y.shape, ref.shape)
    assert y.dtype == ref.dtype, (what, y.dtype, ref.dtype)
    y, ref, scale = y.detach(), ref.detach(), scale.detach()
    err = float(torch.linalg.vector_norm((y.double() - ref.double()).flatten()))
    den = float(torch.linalg.vector_norm(scale.double().flatten()))
    tol = tolerance(dtype, terms)
    assert err <= tol * den + 1e-300, f"{what}: error {err:.3g} > {tol:.3g} * {den:.3g}"


def _channels_first(t, cl):
    return _canonical(t.movedim(-1, 1)) if cl else t


def _channels_last(t, cl):
    return _canonical(t).movedim(1, -1) if cl else t


def _canonical(t):
    """``t`` as a view with the strides a new tensor of its shape has (its gradient too,
    by the same reshape).  A permuted tensor with extents of 1 keeps odd strides on them
    (e.g. ``(20, 1, 20, 4, 1)``); torch 2.14's CPU ``conv3d`` on such operands returned
    garbage (1e37) where the same values with fresh strides gave the right result."""
    return t.reshape(-1).reshape(t.shape)


def ref_conv(x, w, bias, *, stride, pads, dilation, groups, mode, cl):
    """torch.nn.functional.conv{1,2,3}d after F.pad (asymmetric pads and padding modes)."""
    r = w.ndim - 2
    x, w = _channels_first(x, cl), _channels_first(w, cl)
    widths = [p for pair in reversed(pads) for p in pair]
    if mode == "zeros":
        x = F.pad(x, widths)
    else:
        x = F.pad(x, widths, mode=TORCH_MODES[mode])
    y = getattr(F, f"conv{r}d")(x, w, bias, stride, 0, dilation, groups)
    return _channels_last(y, cl)


def ref_conv_transpose(x, w, bias, *, stride, pads, output_padding, dilation, groups, cl):
    """torch.nn.functional.conv_transpose{1,2,3}d with padding 0, cropped to ``pads``."""
    r = w.ndim - 2
    x, w = _channels_first(x, cl), _channels_first(w, cl)
    y = getattr(F, f"conv_transpose{r}d")(x, w, bias, stride, 0, output_padding, groups,
                                          dilation)
    for i, (b, a) in enumerate(pads):
        y = y.narrow(2 + i, b, y.shape[2 + i] - b - a)
    return _channels_last(y, cl)


def grads(fn, inputs, cotangent):
    """Gradients of ``<fn(*inputs), cotangent>`` with respect to the tensors needing one."""
    y = fn(*inputs)
    wanted = [t for t in inputs if t is not None and t.requires_grad]
    return y, torch.autograd.grad(y, wanted, cotangent)


def abs_grads(fn, inputs, cotangent):
    """The same on |inputs| and |cotangent| in float64: the bounds' scale per result."""
    absed = [None if t is None else t.detach().double().abs().requires_grad_(t.requires_grad)
             for t in inputs]
    return grads(fn, absed, cotangent.detach().double().abs())


def noncontiguous(t):
    """``t``'s values in a tensor with every axis strided by 2 (a view, not contiguous)."""
    big = torch.zeros([2 * n for n in t.shape], dtype=t.dtype)
    view = big[tuple(slice(None, None, 2) for _ in t.shape)]
    view.copy_(t)
    return view


@st.composite
def geometries(draw, ranks=(1, 2, 3), modes=tuple(TORCH_MODES), transpose=False):
    """A small conv geometry torch can also compute (pads below the input size)."""
    r = draw(st.sampled_from(ranks))
    groups = draw(st.integers(1, 2))
    g = dict(
        r=r, n=draw(st.integers(1, 2)), groups=groups,
        cin=groups * draw(st.integers(1, 2)), cout=groups * draw(st.integers(1, 2)),
        ks=tuple(draw(st.integers(1, 3)) for _ in range(r)),
        stride=tuple(draw(st.integers(1, 2)) for _ in range(r)),
        dilation=tuple(draw(st.integers(1, 2)) for _ in range(r)),
        mode="zeros" if transpose else draw(st.sampled_from(modes)),
        cl=draw(st.booleans()), bias=draw(st.booleans()),
        dtype=draw(st.sampled_from((torch.float32, torch.float64))),
        strided=draw(st.booleans()))
    sizes, pads, out_pad = [], [], []
    for k, s, d in zip(g["ks"], g["stride"], g["dilation"]):
        span = d * (k - 1) + 1
        size = draw(st.integers(1 if transpose else max(span - 2, 2), span + 3))
        b = draw(st.integers(0, min(2, size - 1)))
        a_low = 0 if transpose else max(span - size - b, 0)   # at least one output
        assume(a_low <= min(2, size - 1))
        a = draw(st.integers(a_low, min(2, size - 1)))
        op = draw(st.integers(0, max(s, d) - 1)) if transpose else 0
        assume((size - 1) * s + span + op - b - a >= 1)
        sizes.append(size)
        pads.append((b, a))
        out_pad.append(op)
    g.update(sizes=tuple(sizes), pads=tuple(pads), output_padding=tuple(out_pad))
    return g


def terms(g, y_shape):
    """The most products any computed element sums (forward, both gradients, bias)."""
    kprod = math.prod(g["ks"])
    spatial = y_shape[1:-1] if g["cl"] else y_shape[2:]
    return max(max(g["cin"], g["cout"]) // g["groups"] * kprod,
               g["n"] * math.prod(spatial) * kprod, 1)
