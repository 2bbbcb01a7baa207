"""The GPU cost model loads the efficiencies the device check measured, when present."""
from __future__ import annotations

import json

import pytest

from cupyconv._dtypes import BFLOAT16
from cupyconv.backends.cuda import EmulatedRunner, cost, implicit_choice, pricing

#: The multistage dtypes: (dtype, precision, efficiency-key kind); bfloat16 reads float16's
#: entries (its atom runs at the f16 atom's rate: ``cost.tensor_kind``).
MULTISTAGE_KINDS = [("float32", "tf32", "tf32"), ("float16", "highest", "float16")] + (
    [("bfloat16", "highest", "float16")] if BFLOAT16 is not None else [])


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
    before = pricing.predict_times(p, device, ["implicit_gemm"])["implicit_gemm"]
    eff_file.write_text(json.dumps({"device": device.name, "efficiency": {
        "implicit_gemm": cost.EFFICIENCY["implicit_gemm"] / 2, "bogus": 0.5, "gemm": 7}}))
    cost.efficiencies.cache_clear()
    eff = cost.efficiencies(device.name)
    assert eff["implicit_gemm"] == cost.EFFICIENCY["implicit_gemm"] / 2
    assert eff["gemm"] == cost.EFFICIENCY["gemm"] and "bogus" not in eff   # out of (0, 1]
    after = pricing.predict_times(p, device, ["implicit_gemm"])["implicit_gemm"]
    host = cost.HOST_S["implicit_gemm"]               # the per-call host time stays
    assert after - host > 1.5 * (before - host)


def test_calibrate_recovers_the_efficiency_that_predicts_a_time(eff_file):
    """calibrate() inverts the model: the fraction it returns, put back in, predicts the
    measured time (for the FFT: the channel-mixing entry on a channel-mixing layer)."""
    from cupyconv.core.problem import ConvProblem
    device = EmulatedRunner.NOMINAL
    layer = ConvProblem.create(x_shape=(4, 64, 24, 24, 24), w_shape=(64, 64, 3, 3, 3),
                               padding=1, dtype="float32")
    for name, want_key in [("implicit_gemm", "implicit_gemm"), ("gemm", "gemm"),
                           ("fft", "fft_mix"), ("winograd", "winograd"), ("direct", "direct")]:
        model = pricing.predict_times(layer, device, [name])[name]
        key, fraction = pricing.calibrate(layer, device, name, 3 * model)
        assert key == want_key
        assert fraction < cost.EFFICIENCY[key]                        # slower: less efficient
        eff = dict(cost.efficiencies(device.name), **{key: fraction})
        again = pricing.predict_times(layer, device, [name], efficiency=eff)[name]
        assert again == pytest.approx(3 * model, rel=1e-6)
    single = ConvProblem.create(x_shape=(1, 1, 64, 64, 64), w_shape=(1, 1, 5, 5, 5),
                                padding=2, dtype="float32")
    assert pricing.calibrate(single, device, "fft", 1.0)[0] == "fft"    # no mixing
    assert pricing.calibrate(layer, device, "gemm", 1e-9)[1] == 1.0      # faster than any model
    half = ConvProblem.create(x_shape=(4, 64, 24, 24, 24), w_shape=(64, 64, 3, 3, 3),
                              padding=1, dtype="float16")
    assert pricing.calibrate(half, device, "winograd", 1e-3) == ("winograd", None)  # no model


@pytest.mark.parametrize("text", ["{not json", '{"efficiency": 3}', "[1, 2]"])
def test_malformed_file_warns_and_keeps_the_defaults(eff_file, text):
    eff_file.write_text(text)
    with pytest.warns(RuntimeWarning, match="ignoring the efficiency file"):
        assert cost.efficiencies("X") == cost.EFFICIENCY


def test_path_is_per_device(monkeypatch, tmp_path):
    monkeypatch.delenv("CUPYCONV_EFFICIENCY", raising=False)
    monkeypatch.setenv("CUPYCONV_CACHE_DIR", str(tmp_path))
    assert cost.efficiency_path("NVIDIA H200").endswith("efficiency/nvidia-h200.json")


def _layer(dtype, precision="highest", channels=64):
    from cupyconv.core.problem import ConvProblem
    return ConvProblem.create(x_shape=(32, channels, 64, 64), w_shape=(64, channels, 3, 3),
                              padding=1, dtype=dtype, precision=precision)


@pytest.mark.parametrize("dtype,precision,atom", [("float64", "highest", "float64"),
                                                  ("float32", "tf32", "tf32"),
                                                  ("float16", "highest", "float16")])
def test_tensor_core_tiles_use_the_tensor_peak(eff_file, dtype, precision, atom):
    """The implicit GEMM's prediction on an sm_80 device follows the tensor-core peak
    (and its own efficiency) where a tensor-core tile runs the problem, the FMA peak
    where none fits (C/G not a multiple of the tile's K) or on an older device."""
    import dataclasses
    device = EmulatedRunner.NOMINAL
    fast = pricing.predict_times(_layer(dtype, precision), device, ["implicit_gemm"])["implicit_gemm"]
    odd = _layer(dtype, precision, channels=60)
    unaligned = pricing.predict_times(odd, device, ["implicit_gemm"])["implicit_gemm"]
    old = dataclasses.replace(device, arch=70)
    fma = pricing.predict_times(_layer(dtype, precision), old, ["implicit_gemm"])["implicit_gemm"]
    peak = cost.tensor_peak_flops(_layer(dtype, precision), device)
    assert peak == cost.TENSOR_FLOPS_PER_SM_CLOCK[80][atom] * device.sm_count * device.clock_hz
    assert cost.tensor_peak_flops(_layer(dtype, precision), old) is None
    assert fast < fma and fast < unaligned


def test_float32_highest_stays_on_the_fma_peak(eff_file):
    device = EmulatedRunner.NOMINAL
    assert cost.tensor_peak_flops(_layer("float32"), device) is None
    highest = pricing.predict_times(_layer("float32"), device, ["implicit_gemm", "gemm"])
    tf32 = pricing.predict_times(_layer("float32", "tf32"), device, ["implicit_gemm", "gemm"])
    assert all(tf32[k] < highest[k] for k in highest)


def test_small_launches_are_slowed_by_their_fill_and_floored_by_host_time(eff_file):
    """A direct launch of few outputs leaves SMs idle: its FLOP rate is lower than a
    large one's; and no prediction is below the algorithm's host time per call."""
    from cupyconv.core.problem import ConvProblem
    device = EmulatedRunner.NOMINAL

    def rate(shape):
        p = ConvProblem.create(x_shape=(1, 1) + shape, w_shape=(1, 1, 31, 31), dtype="float64")
        t = pricing.predict_times(p, device, ["direct"])["direct"]
        return p.flops / t, t
    small, t_small = rate((192, 192))
    large, _ = rate((2048, 2048))
    assert small < 0.5 * large
    tiny = ConvProblem.create(x_shape=(1, 1, 4), w_shape=(1, 1, 3), dtype="float32")
    times = pricing.predict_times(tiny, device, sorted(cost.HOST_S))
    assert all(times[n] >= cost.HOST_S[n] for n in times)
    assert times["direct"] == min(times.values())


@pytest.mark.parametrize("dtype,precision,kind", MULTISTAGE_KINDS)
def test_multistage_tiles_charge_the_relayout(eff_file, dtype, precision, kind):
    """Where a multistage tile runs the layer (C/G a multiple of its K-tile) the model uses
    its efficiency, and channels-first operands pay the re-layout pass over x and w
    (backends.cuda.relayout) that channels-last ones do not; C/G = 48 keeps the variant-2
    entry and no re-layout."""
    from cupyconv.backends.cuda import pricing, relayout
    from cupyconv.core.problem import ConvProblem
    device = EmulatedRunner.NOMINAL
    def layer(channels=64, layout="channels_first"):     # 3-D: the device time dominates
        x, w = (8, channels, 32, 32, 32), (64, channels, 3, 3, 3)
        if layout == "channels_last":
            x, w = (x[0],) + x[2:] + (x[1],), (w[0],) + w[2:] + (w[1],)
        return ConvProblem.create(x_shape=x, w_shape=w, padding=1, dtype=dtype,
                                  precision=precision, layout=layout)
    first, last = layer(), layer(layout="channels_last")
    assert pricing.efficiency_key(first, device, "implicit_gemm") == "implicit_gemm_ms_" + kind
    t_first, t_last = (pricing.predict_times(p, device, ["implicit_gemm"])["implicit_gemm"]
                       for p in (first, last))
    charge = relayout.relayout_bytes(first) / device.bandwidth + 2 * cost.LAUNCH_S
    assert t_first - t_last == pytest.approx(charge, rel=1e-9)
    assert t_last > cost.HOST_S["implicit_gemm"]
    odd = layer(channels=48)
    assert pricing.efficiency_key(odd, device, "implicit_gemm") == "implicit_gemm_tc_" + kind


@pytest.mark.parametrize("dtype,precision", [c[:2] for c in MULTISTAGE_KINDS])
def test_relayout_is_taken_only_when_it_pays(eff_file, dtype, precision):
    """A stand-in device whose bandwidth falls: the re-layout's pass over x and w costs
    more and more while the multistage tile's gain over the variant-2 tile stays (both
    compute-bound on the 3-D layer), so ``relayout_pays`` flips from True to False at the
    bandwidth where the charge passes the gain, and the implicit GEMM's prediction is the
    faster of the two; frozen weights (``weights=False``: x alone re-laid) pay sooner."""
    import dataclasses
    from cupyconv.core.problem import ConvProblem
    layer = ConvProblem.create(x_shape=(8, 64, 32, 32, 32), w_shape=(64, 64, 3, 3, 3),
                               padding=1, dtype=dtype, precision=precision)
    eff = cost.efficiencies(EmulatedRunner.NOMINAL.name)
    verdicts = []
    for scale in (1.0, 0.1, 0.01, 0.001):
        device = dataclasses.replace(EmulatedRunner.NOMINAL,
                                     bandwidth=EmulatedRunner.NOMINAL.bandwidth * scale)
        best, base, relaid = implicit_choice.implicit_gemm_times(layer, device, eff)
        assert relaid is not None and best == min(base, relaid)
        assert pricing.predict_times(layer, device, ["implicit_gemm"])["implicit_gemm"] == best
        pays = implicit_choice.relayout_pays(layer, device)
        assert pays == (relaid < base)
        verdicts.append((pays, implicit_choice.relayout_pays(layer, device, weights=False)))
        assert verdicts[-1][1] >= pays          # x alone: a smaller charge, the same gain
    assert verdicts[0] == (True, True) and verdicts[-1][0] is False, verdicts
    flips = [v[0] for v in verdicts]
    assert flips == sorted(flips, reverse=True)  # one flip, True then False
