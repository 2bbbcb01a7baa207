"""The operators' fake implementations against real runs (``torch.library.opcheck``),
meta tensors, and ``torch.compile(fullgraph=True)`` with no graph break."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings, strategies as st  # noqa: E402
from torch.library import opcheck  # noqa: E402

import cupyconv.torch as ct  # noqa: E402
from torch_oracle import geometries  # noqa: E402

ops = torch.ops.cupyconv
# The cheap check of the fake against the real run (shapes, dtypes, strides, devices)
# on every geometry; the whole suite (schema, autograd registration, AOT dispatch with
# dynamic shapes) on a few.
FAKE_ONLY = ("test_schema", "test_faketensor")


def _operands(g, transpose, seed):
    gen = torch.Generator().manual_seed(seed)
    cl = g["cl"]
    x_shape = ((g["n"], *g["sizes"], g["cin"]) if cl else (g["n"], g["cin"], *g["sizes"]))
    first, second = ((g["cin"], g["cout"] // g["groups"]) if transpose
                     else (g["cout"], g["cin"] // g["groups"]))
    w_shape = (first, *g["ks"], second) if cl else (first, second, *g["ks"])
    x = torch.randn(x_shape, generator=gen, dtype=g["dtype"], requires_grad=True)
    w = torch.randn(w_shape, generator=gen, dtype=g["dtype"], requires_grad=True)
    b = (torch.randn(g["cout"], generator=gen, dtype=g["dtype"], requires_grad=True)
         if g["bias"] else None)
    return x, w, b


def _flat(pads):
    return [p for pair in pads for p in pair]


def _conv_args(g, seed):
    x, w, b = _operands(g, False, seed)
    mode = {"zeros": "constant", "replicate": "edge", "circular": "wrap"}.get(g["mode"],
                                                                              g["mode"])
    return (x, w, b, list(g["stride"]), _flat(g["pads"]), list(g["dilation"]), g["groups"],
            mode, 0.0, g["cl"])


@settings(max_examples=100)
@given(g=geometries(ranks=(1, 2, 3, 4)), transpose=st.booleans(),
       seed=st.integers(0, 2 ** 16))
def test_fake_matches_real_on_random_geometries(g, transpose, seed):
    if transpose:
        g = dict(g, mode="zeros")
        x, w, b = _operands(g, True, seed)
        args = (x, w, b, list(g["stride"]), _flat(g["pads"]), list(g["output_padding"]),
                list(g["dilation"]), g["groups"], g["cl"])
        # geometries() draws transposed pads from the forward rule; keep those that fit
        if any(o < 1 for o in torch.ops.cupyconv.conv_transpose(*args).shape):
            return
        opcheck(ops.conv_transpose.default, args, test_utils=FAKE_ONLY)
    else:
        opcheck(ops.conv.default, _conv_args(g, seed), test_utils=FAKE_ONLY)


@pytest.mark.parametrize("seed", range(3))
def test_every_operator_passes_the_whole_opcheck(seed):
    g = dict(n=2, cin=2, cout=4, groups=2, sizes=(5, 4), ks=(3, 2), stride=(2, 1),
             dilation=(1, 2), pads=((1, 0), (2, 1)), mode=("zeros", "reflect",
                                                           "circular")[seed],
             cl=bool(seed % 2), bias=True, dtype=torch.float64)
    conv_args = _conv_args(g, seed)
    opcheck(ops.conv.default, conv_args)
    x, w, b, *geo = conv_args
    y = ops.conv(*conv_args).detach().requires_grad_()
    mode_geo = geo[:5] + geo[6:]                      # without cval
    opcheck(ops.conv_grad_input.default, (y, w, list(x.shape), *mode_geo))
    opcheck(ops.conv_grad_weight.default, (x, y, list(w.shape), *geo))
    opcheck(ops.conv_grad_bias.default, (y, g["cl"]))
    xt, wt, bt = _operands(g, True, seed)
    opcheck(ops.conv_transpose.default, (xt, wt, bt, [2, 1], [1, 0, 0, 1], [1, 1], [1, 2],
                                         2, g["cl"]))


def test_meta_tensors_give_shapes_without_running():
    x = torch.empty(2, 3, 9, 8, 7, 6, device="meta")
    w = torch.empty(4, 3, 3, 3, 3, 3, device="meta")
    y = ct.conv(x, w, stride=2, padding=1)
    assert y.device.type == "meta" and y.shape == (2, 4, 5, 4, 4, 3)
    yt = ct.conv_transpose(y, w, stride=2, padding=1, output_padding=1)
    assert yt.shape == (2, 3, 10, 8, 8, 6)
    with pytest.raises(ValueError, match="groups"):     # cupyconv's own validation
        ct.conv(x, w, groups=2)
    with pytest.raises(ValueError, match="input channels"):
        ct.conv_transpose(y, w.transpose(0, 1))


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        ct.Conv4d(2, 4, 3, padding=1, padding_mode="circular"), torch.nn.ReLU(),
        ct.Conv4d(4, 4, 2, stride=2, groups=2),
        ct.ConvTransposeNd(4, 1, 2, stride=2, ndim=4)).double()


def test_compile_fullgraph_without_graph_break():
    eager, compiled = _model(), _model()
    run = torch.compile(compiled, fullgraph=True, backend="aot_eager")
    x = torch.randn(2, 2, 4, 4, 4, 4, dtype=torch.float64)
    y_eager, y_compiled = eager(x), run(x)
    torch.testing.assert_close(y_compiled, y_eager, rtol=0, atol=0)
    y_eager.square().sum().backward()
    y_compiled.square().sum().backward()
    for p, q in zip(compiled.parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)


def test_compile_functional_call_with_same_padding():
    def f(x, w):
        return ct.conv(x, w, padding="same", padding_mode="reflect").sin()
    x, w = torch.randn(1, 2, 6, 5, 4), torch.randn(3, 2, 3, 3, 1)
    torch.testing.assert_close(torch.compile(f, fullgraph=True, backend="aot_eager")(x, w),
                               f(x, w), rtol=0, atol=0)


@pytest.mark.parametrize("cl", [False, True])
def test_compile_with_dynamic_shapes_gives_the_eager_values(cl):
    layout = "channels_last" if cl else "channels_first"

    def f(x, w, wt):
        y = ct.conv(x, w, stride=2, padding=1, layout=layout)
        return ct.conv_transpose(y, wt, stride=2, padding=1, output_padding=1,
                                 layout=layout).sin()
    run = torch.compile(f, fullgraph=True, backend="aot_eager", dynamic=True)
    gen = torch.Generator().manual_seed(0)
    w = torch.randn((3, 3, 3, 2) if cl else (3, 2, 3, 3), generator=gen, dtype=torch.float64)
    wt = torch.randn((3, 3, 3, 2) if cl else (3, 2, 3, 3), generator=gen, dtype=torch.float64)
    for sizes in ((6, 5), (9, 7), (8, 11)):        # one graph for every size
        x = torch.randn((2, *sizes, 2) if cl else (2, 2, *sizes), generator=gen,
                        dtype=torch.float64)
        torch.testing.assert_close(run(x, w, wt), f(x, w, wt), rtol=0, atol=0)
