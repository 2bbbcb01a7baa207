"""The GPU cost model loads the efficiencies the device check measured, when present."""
from __future__ import annotations

import json

import pytest

from cupyconv.backends.cuda import EmulatedRunner, cost


@pytest.fixture
def eff_file(tmp_path, monkeypatch):
    path = tmp_path / "eff.json"
    monkeypatch.setenv("CUPYCONV_EFFICIENCY", str(path))
    cost.efficiencies.cache_clear()
    yield path
    cost.efficiencies.cache_clear()


def test_defaults_without_a_file(eff_file):
    assert cost.efficiencies("H200") == cost.EFFICIENCY


def test_measured_values_replace_the_defaults_and_change_predictions(eff_file):
    from cupyconv.core.problem import ConvProblem
    p = ConvProblem.create(x_shape=(8, 64, 32, 32), w_shape=(64, 64, 3, 3), padding=1,
                           dtype="float32")
    device = EmulatedRunner.NOMINAL
    before = cost.predict_times(p, device, ["implicit_gemm"])["implicit_gemm"]
    eff_file.write_text(json.dumps({"device": device.name, "efficiency": {
        "implicit_gemm": cost.EFFICIENCY["implicit_gemm"] / 2, "bogus": 0.5, "gemm": 7}}))
    cost.efficiencies.cache_clear()
    eff = cost.efficiencies(device.name)
    assert eff["implicit_gemm"] == cost.EFFICIENCY["implicit_gemm"] / 2
    assert eff["gemm"] == cost.EFFICIENCY["gemm"] and "bogus" not in eff   # out of (0, 1]
    after = cost.predict_times(p, device, ["implicit_gemm"])["implicit_gemm"]
    assert after > 1.5 * before


@pytest.mark.parametrize("text", ["{not json", '{"efficiency": 3}', "[1, 2]"])
def test_malformed_file_warns_and_keeps_the_defaults(eff_file, text):
    eff_file.write_text(text)
    with pytest.warns(RuntimeWarning, match="ignoring the efficiency file"):
        assert cost.efficiencies("X") == cost.EFFICIENCY


def test_path_is_per_device(monkeypatch, tmp_path):
    monkeypatch.delenv("CUPYCONV_EFFICIENCY", raising=False)
    monkeypatch.setenv("CUPYCONV_CACHE_DIR", str(tmp_path))
    assert cost.efficiency_path("NVIDIA H200").endswith("efficiency/nvidia-h200.json")
