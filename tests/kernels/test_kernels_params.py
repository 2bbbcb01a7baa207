"""Host-side pieces of the kernel layer: params layout, fast divmod, registry, checks."""
from __future__ import annotations

import numpy as np
import pytest

from cupyconv._kernels import launch, registry
from cupyconv._kernels.params import (conv_params_dtype, conv_params_words, fast_divmod_params,
                                      logical_strides, pack_conv_params)

from kernel_reference import make_problem


def _device_div32(n, p):
    d, m32, _, shift = p
    return n if d == 1 else ((n * m32) >> 32) >> shift


def _device_div64(n, p):
    d, _, m64, shift = p
    return n if d == 1 else ((n * (m64 % 2**64)) >> 64) >> shift


@pytest.mark.parametrize("d", [1, 2, 3, 5, 7, 8, 9, 10, 31, 641, 65535, 65536, 2**20 + 1,
                               2**30 - 1, 2**30, 2**31 - 1])
def test_fast_divmod_matches_integer_division(d):
    p = fast_divmod_params(d)
    rng = np.random.default_rng(d)
    ns = [0, 1, d - 1, d, d + 1, 2**31 - 1, 2**31 - 2] + [int(v) for v in rng.integers(0, 2**31, 200)]
    for n in ns:
        assert _device_div32(n, p) == n // d, (n, d)
    ns64 = ns + [2**63 - 1, 2**62 + 12345] + [int(v) for v in rng.integers(0, 2**63 - 1, 200)]
    for n in ns64:
        assert _device_div64(n, p) == n // d, (n, d)
    assert 0 <= p[1] < 2**32


def test_fast_divmod_rejects_zero():
    with pytest.raises(ValueError):
        fast_divmod_params(0)


@pytest.mark.parametrize("rank", range(1, 9))
def test_params_layout_matches_cuda_struct(rank):
    dt = conv_params_dtype(rank)
    assert dt.itemsize == 8 * conv_params_words(rank)
    assert dt.itemsize <= 4096  # kernel parameter limit
    assert conv_params_dtype(rank) is dt  # memoised


def test_pack_params_channels_last_strides():
    prob = make_problem(n=2, c=4, k=6, g=2, s=(5, 7), ks=(3, 2), stride=(2, 1), dilation=(1, 2),
                        padding=((1, 0), (2, 3)), mode="reflect", layout="channels_last",
                        dtype=np.complex64, flip=True, cval=0)
    x = np.zeros(prob.x_shape, np.complex64)[:, ::-1]
    xs = logical_strides(x, prob.layout, prob.ndim)
    assert xs == (5 * 7 * 4, 1, (-7 * 4, 4))
    p = pack_conv_params(prob, x_strides=xs, alpha=2 + 1j, beta=0.5)
    assert p["x_stride_c"] == 1 and tuple(p["x_stride"]) == (-28, 4)
    assert p["pad_mode"] == 1 and p["flip"] == 1 and p["cpg"] == 2 and p["kpg"] == 3
    assert (p["alpha_re"], p["alpha_im"], p["beta_re"]) == (2.0, 1.0, 0.5)
    assert p["gemm_k"] == prob.gemm_k and p["gemm_m"] == prob.gemm_m
    assert tuple(p["div_taps"]) == fast_divmod_params(6)


def test_logical_strides_rejects_misaligned_views():
    rec = np.zeros(4, dtype=[("a", np.float32), ("b", np.float64)])
    with pytest.raises(ValueError, match="multiple of the itemsize"):
        logical_strides(rec["b"].reshape(1, 1, 4), "channels_first", 1)


def test_registry_names_and_lookup():
    name = registry.name_expression("implicit_gemm_fprop", np.float32, 3, False, (64, 64, 8, 0))
    assert name == "implicit_gemm_fprop<float, float, 3, int, 64, 64, 8, 0>"
    assert registry.name_expression("col2vol", np.complex128, 5, True) == \
        "col2vol<cc::complex<double>, 5, long long>"
    inst = registry.lookup(name)
    assert inst.group == ("conv/implicit_gemm_fprop.cu", "float32", 3)
    names = {i.name for i in registry.instantiations()}
    assert len(names) == len(registry.instantiations())  # no duplicates
    with pytest.raises(TypeError, match="dtypes"):
        registry.dtype_spec(np.int8)


def test_can_implement_reports_reasons():
    prob = make_problem(n=1, c=1, k=1, g=1, s=(8,), ks=(3,), stride=(1,), dilation=(1,), padding=0,
                        dtype=np.int32)
    ok, why = launch.can_implement_implicit_gemm(prob)
    assert not ok and "int32" in why
    with pytest.raises(ValueError, match="int32"):
        launch.run_vol2col(lambda *a: None, prob, np.zeros(prob.x_shape, np.int32), np.zeros(24, np.int32))


def test_choose_index64_threshold():
    prob = make_problem(n=1, c=1, k=1, g=1, s=(8,), ks=(3,), stride=(1,), dilation=(1,), padding=0)
    small = ((1, 1, (1,)), (1, 1, (8,)))
    assert not launch.choose_index64(prob, small)
    huge = ((2**31, 1, (1,)), (2, 1, (8,)))
    assert launch.choose_index64(prob, huge)
    assert launch.choose_index64(prob, small, extra=2**31)


def test_forward_launchers_of_the_tests_are_conv_families():
    """The tests' table of forward launchers names families of the registry that take
    ``ConvParams`` first."""
    from cupyconv._kernels import families
    from kernel_reference import FORWARD_LAUNCHERS
    for family in FORWARD_LAUNCHERS:
        assert registry.FAMILIES[family].params[0] is families.CONV_PARAMS
