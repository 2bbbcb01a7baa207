"""The benchmark runner, peers and report on the CPU (cupyconv/_bench/run.py)."""
from __future__ import annotations

import json
import pathlib
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cupyconv._bench import peers, report, run  # noqa: E402
from cupyconv._bench.problems import Case  # noqa: E402

import cupyconv  # noqa: E402

#: Fixed ceilings: the tests never measure the machine.
CEILINGS = dict(bandwidth=1e10, flops={"float32": 1e11, "float64": 5e10}, how="test")


def _ctx(**kw):
    return run.Context("numpy", repeat=1, ceilings=CEILINGS, **kw)


def test_runner_end_to_end_writes_json_and_markdown(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    rc = run.main(["--suite", "scientific", "--quick", "--cases", "2-D 256x256",
                   "--repeat", "1", "--out", str(tmp_path), "--backend", "numpy",
                   "--no-plots"])
    assert rc == 0
    data = json.loads((tmp_path / "scientific_quick_numpy.json").read_text())
    assert data["meta"]["backend"] == "numpy" and data["meta"]["quick"] is True
    assert "No usable GPU" in data["meta"]["notes"][0]
    (row,) = data["rows"]
    assert row["auto_s"] > 0 and row["auto_choice"] in row["method_s"]
    assert row["fastest"] in row["method_s"] and row["fraction"] > 0
    assert row["peers"]["scipy.signal"]["status"] == "ok"
    assert row["peers"]["scipy.signal"]["rel_diff"] < 1e-5
    md = (tmp_path / "scientific_quick_numpy.md").read_text()
    assert "| case | cupyconv auto (ms) |" in md and row["name"] in md
    out = capsys.readouterr().out
    assert "No GPU in use" in out
    assert f"[1/1] {row['name']} ..." in out                # which case it is on


def test_cli_bench_subcommand_passes_flags(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(run, "main", lambda argv, prog: seen.update(argv=argv, prog=prog) or 0)
    from cupyconv import __main__ as cli
    assert cli.main(["bench", "--suite", "gradients", "--quick", "--out", str(tmp_path),
                     "--backend", "numpy", "--no-plots", "--cases", "x", "--repeat", "3",
                     "--peers", "scipy.signal"]) == 0
    assert seen["argv"] == ["--suite", "gradients", "--quick", "--out", str(tmp_path),
                            "--backend", "numpy", "--no-plots", "--cases", "x", "--repeat", "3",
                            "--peers", "scipy.signal"]
    assert seen["prog"].endswith("cupyconv bench")


@pytest.mark.parametrize("case", [
    Case("t", "conv", (7, 6), (3, 3), batch=2, cin=3, cout=4, padding=1,
         layout="channels_last"),
    Case("t", "conv", (9,), (3,), batch=1, cin=2, cout=2, stride=2, dilation=2),
    Case("t", "signal", (20, 20), (5, 5), dtype="complex64", mode="same", func="correlate"),
])
def test_tiny_cases_agree_with_their_peers(case):
    row = run.run_case(case, _ctx())
    assert "skipped" not in row
    ok = [p for p in row["peers"].values() if p["status"] == "ok"]
    assert ok, row["peers"]
    for p in ok:
        assert p["rel_diff"] < 1e-5 and p["speedup"] > 0 and p["peak_bytes"] >= 0


def test_absent_peer_is_reported_not_used(monkeypatch):
    real = peers.importlib.import_module

    def fake(name, *a):
        if name == "scipy.ndimage":
            raise ModuleNotFoundError(name)
        return real(name, *a)
    monkeypatch.setattr(peers.importlib, "import_module", fake)
    ctx = _ctx()
    assert ctx.peer_status["scipy.ndimage"] == "not importable (ModuleNotFoundError)"
    assert ctx.peer_status["jax-cpu"] != "available" or "jax" in sys.modules
    row = run.run_case(Case("t", "signal", (16, 16), (3, 3)), ctx)
    assert "scipy.ndimage" not in row["peers"]
    assert row["peers"]["scipy.signal"]["status"] == "ok"


def test_failing_peer_is_recorded_with_its_error_class():
    def prepare(case, arrays):
        def fn():
            raise RuntimeError("no kernel image for this rank")
        return fn
    broken = peers.Peer("broken", "cpu", "numpy", lambda case: None, prepare, False)
    ctx = _ctx(peer_names=[])
    ctx.peers = [broken]
    row = run.run_case(Case("t", "signal", (16,), (3,)), ctx)
    assert row["peers"]["broken"]["status"] == "fails"
    assert row["peers"]["broken"]["error"] == "RuntimeError"
    assert "fails (RuntimeError)" in report.markdown(
        run.metadata(_Args(), ctx, "cmd"), [row])


class _Args:
    suite, quick = "t", True


def test_absent_gradient_function_skips_with_a_note(monkeypatch):
    monkeypatch.delattr(cupyconv, "conv_grad_input", raising=False)
    row = run.run_case(Case("t", "grad_input", (6, 6, 6), (3, 3, 3), cin=2, cout=2,
                            padding=1), _ctx(peer_names=[]))
    assert "conv_grad_input is not in this version" in row["skipped"]


def test_scipy_gradient_peers_are_adjoint_to_conv():
    x_case = Case("t", "grad_input", (7, 6), (3, 3), batch=2, cin=3, cout=2, padding=1)
    w_case = Case("t", "grad_weight", (7, 6), (3, 3), batch=2, cin=3, cout=2, padding=1)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(x_case.x_shape), rng.standard_normal(x_case.w_shape)
    dy = rng.standard_normal(x_case.y_shape())
    y = cupyconv.conv(x, w, padding=1)
    peer = peers.PEERS[[p.name for p in peers.PEERS].index("scipy.fftconvolve")]
    dx = peer.prepare(x_case, {"dy": dy, "w": w})()
    dw = peer.prepare(w_case, {"x": x, "dy": dy})()
    assert np.vdot(y, dy) == pytest.approx(np.vdot(x, dx), rel=1e-10)
    assert np.vdot(y, dy) == pytest.approx(np.vdot(w, dw), rel=1e-10)


def test_recursive_conv_matches_native_4d():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 7, 6, 5, 6))
    w = rng.standard_normal((4, 3, 3, 2, 3, 3))
    geo = dict(stride=(2, 1, 1, 2), padding=(1, 0, 2, 1), dilation=(2, 1, 1, 1))

    def base(x, w, stride, padding, dilation):
        return cupyconv.conv(x, w, stride=stride, padding=padding, dilation=dilation)
    got = peers.conv_recursive(x, w, geo["stride"], geo["padding"], geo["dilation"], base,
                               base_rank=2)
    np.testing.assert_allclose(got, cupyconv.conv(x, w, **geo), rtol=1e-12, atol=1e-12)


def test_plots_are_skipped_with_a_note_without_matplotlib(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert report.plots(str(tmp_path), "x", {}, [{"name": "a"}]) == []
    assert "matplotlib is not installed" in capsys.readouterr().out


def test_plots_are_written_with_matplotlib(tmp_path):
    pytest.importorskip("matplotlib")
    ctx = _ctx()
    rows = [run.run_case(Case("t", "signal", (32, 32), (3, 3)), ctx)]
    paths = report.plots(str(tmp_path), "t", run.metadata(_Args(), ctx, "cmd"), rows)
    assert [pathlib.Path(p).stat().st_size > 0 for p in paths] == [True, True]


def test_glue_smoke_runs_every_family_and_catches_a_wrong_launch(monkeypatch, tmp_path, capsys):
    """The device check's first step, on the emulated backend: every family x dtype
    passes, and a launcher that computes garbage makes it fail (exit 1)."""
    import json

    import cupyconv
    from benchmarks import glue_smoke
    from cupyconv._kernels import program
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("CUDA emulation unavailable")
    out = tmp_path / "smoke.json"
    assert glue_smoke.main(["--backend", "emulated", "--ranks", "1", "--out", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert {r["family"] for r in results} == set(glue_smoke.ROUTES)
    from cupyconv._kernels import registry       # no family is left out unsaid
    assert set(registry.FAMILIES) == set(glue_smoke.ROUTES) | set(glue_smoke.NOT_AT_SMOKE_SIZE)
    tiles = {r["detail"].split(", rel")[0] for r in results
             if r["family"] == "implicit_gemm_multistage"}     # by explicit tile, each one
    assert tiles == {f"tile {t}" for d in ("float32", "float16")
                     for t in registry.tiles_for("implicit_gemm_multistage", d, 1)}
    assert all(r["ok"] for r in results) and "0 failed" in capsys.readouterr().out
    real = program.execute

    def wrong(prog, xp, bound):
        arrays = real(prog, xp, bound)
        if prog.name == "direct":
            arrays[prog.result][...] += 1                 # a planted bug
        return arrays
    monkeypatch.setattr(program, "execute", wrong)
    assert glue_smoke.main(["--backend", "emulated", "--ranks", "1"]) == 1


#: Rows the console prints, and the labels each line must carry (issue 28: the rows
#: printed ``fft / fft``, ``n/r / gemm`` and ``1.6e+02% com`` unlabelled).
_ROW = dict(name="case", auto_s=0.0123, fraction=1.6, bound="compute",
            peers={"scipy.signal": {"status": "ok", "speedup": 2.0}})
CONSOLE_ROWS = [
    ("auto-is-fastest", dict(_ROW, auto_choice="fft", fastest="fft", auto_vs_fastest=1.0),
     ["auto 12.3 ms", "auto chose fft (the fastest)", "roofline 160% of compute peak",
      "speed-up vs peers: scipy.signal 2.00x"]),
    ("not-reported", dict(_ROW, auto_choice=None, fastest="gemm"),
     ["auto chose not reported, fastest gemm"]),
    ("slower-choice", dict(_ROW, auto_choice="direct", fastest="gemm", auto_vs_fastest=1.3,
                           fraction=0.0123, bound="memory"),
     ["auto chose direct, fastest gemm (1.30x)", "roofline 1.2% of memory peak"]),
]


@pytest.mark.parametrize("row, labels", [c[1:] for c in CONSOLE_ROWS],
                         ids=[c[0] for c in CONSOLE_ROWS])
def test_console_rows_are_labelled(row, labels):
    line = report.progress_line(row)
    for label in labels:
        assert label in line, line
    for bare in (" fft / fft", "n/r", "e+02", "% com "):
        assert bare not in line, line


def test_plots_from_an_earlier_runs_json(tmp_path, capsys):
    """``bench --plots-from RUN.json`` draws the run's two plots beside it, timing nothing."""
    pytest.importorskip("matplotlib", reason="plots need the bench extra")
    src = ROOT / "docs" / "benchmarks" / "gpu_h200_2026-12-01" / "first_run" / "all_quick_cuda.json"
    run_json = tmp_path / "all_quick_cuda.json"
    run_json.write_text(src.read_text())
    assert run.main(["--plots-from", str(run_json)]) == 0
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "all_quick_cuda_roofline.png", "all_quick_cuda_speedup.png"]
    assert "wrote " in capsys.readouterr().out
