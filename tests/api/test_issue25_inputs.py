"""Regression tests of issue 25 (reliability round 3), items 4-7: each case failed
before its fix (a silent float64 Winograd on long double, no warning for non-finite
Winograd data, non-native byte order refused, errors raised late or not at all,
SciPy parity of ``cupyconv.ndimage`` on degenerate input)."""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv

F32 = np.float32


# ------------------------------------------------ item 6: errors at the right time
#: Settings and values that must be refused on assignment, with the words the
#: message must contain (the setting and its allowed values).
BAD_SETTINGS = [
    ("precision", "bogus", ValueError, "'highest' or 'tf32'"),
    ("precision", None, ValueError, "'highest' or 'tf32'"),
    ("autotune", 1, TypeError, "True or False"),
    ("autotune", "yes", TypeError, "True or False"),
    ("workspace_limit", 0, ValueError, "positive int"),
    ("workspace_limit", 1.5, TypeError, "positive int"),
    ("workspace_limit", True, TypeError, "positive int"),
    ("winograd_max_error_growth", -1.0, ValueError, ">= 0"),
    ("winograd_max_error_growth", float("nan"), ValueError, ">= 0"),
    ("winograd_max_error_growth", "10", TypeError, ">= 0"),
]


@pytest.mark.parametrize("name, value, error, words", BAD_SETTINGS)
def test_gh25_config_is_validated_on_assignment(restore_config, name, value, error, words):
    before = getattr(cupyconv.config, name)
    with pytest.raises(error, match=f"cupyconv.config.{name}") as info:
        setattr(cupyconv.config, name, value)
    assert words in str(info.value)
    assert getattr(cupyconv.config, name) == before            # nothing was stored


def test_gh25_config_accepts_its_values_and_rejects_unknown_names(restore_config):
    config = cupyconv.config
    config.autotune = np.bool_(True)
    config.workspace_limit = np.int64(1 << 20)
    config.winograd_max_error_growth = 0
    config.precision = "tf32"
    assert (config.autotune, config.workspace_limit, config.precision) == (True, 1 << 20, "tf32")
    assert type(config.autotune) is bool and type(config.workspace_limit) is int
    with pytest.raises(AttributeError, match="no setting 'autotun'.*'autotune'"):
        config.autotun = True
    with pytest.raises(AttributeError, match="cannot be deleted"):
        del config.precision
    settings = {k for k in vars(config) if not k.startswith("_")}
    assert settings == {"autotune", "workspace_limit", "winograd_max_error_growth", "precision"}


def _layer(dtype):
    return np.ones((1, 1, 6, 6), dtype), np.ones((1, 1, 3, 3), dtype)


def test_gh25_operator_fails_at_construction():
    with pytest.raises(ValueError, match="precision='tf32'.*the data is float64"):
        cupyconv.ConvOperator(np.ones((3, 3)), (8, 8), precision="tf32")
    with pytest.raises(ValueError, match="precision must be one of"):
        cupyconv.ConvOperator(np.ones((3, 3), F32), (8, 8), precision="fast")
    with pytest.raises(ValueError, match="precision='tf32'.*the data is float64"):
        cupyconv.ConvOperator.from_conv(np.ones((1, 1, 3)), (1, 1, 5), precision="tf32")
    with pytest.raises(TypeError, match="w has dtype object"):
        cupyconv.ConvOperator.from_conv(np.ones((1, 1, 3), dtype=object), (1, 1, 5))
    op = cupyconv.ConvOperator(np.ones((3, 3), F32), (8, 8), precision="tf32")   # float32: fine
    assert op.matvec(np.ones(64, F32)).dtype == F32


INT_TF32_CALLS = {
    "grad_input": lambda x, w: cupyconv.conv_grad_input(np.ones((1, 1, 4, 4), x.dtype), w,
                                                        x.shape, precision="tf32"),
    "grad_weight": lambda x, w: cupyconv.conv_grad_weight(x, np.ones((1, 1, 4, 4), x.dtype),
                                                          w.shape, precision="tf32"),
    "transpose": lambda x, w: cupyconv.conv_transpose(x, w, precision="tf32"),
    "conv": lambda x, w: cupyconv.conv(x, w, precision="tf32"),
}


@pytest.mark.parametrize("name", sorted(INT_TF32_CALLS))
def test_gh25_tf32_error_names_the_data_dtype(name):
    x, w = _layer(np.int32)
    with pytest.raises(ValueError, match="precision='tf32'") as info:
        INT_TF32_CALLS[name](x, w)
    assert "the data is int32" in str(info.value)
