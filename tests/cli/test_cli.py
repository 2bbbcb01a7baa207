"""``python -m cupyconv`` subcommands, run as a user would."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

from cupyconv import _cli
from limits import child_limit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "cupyconv", *args], capture_output=True,
                          text=True, timeout=child_limit(start_s=75), env=env, cwd=ROOT)


def test_info_lists_backends():
    res = _run("info")
    assert res.returncode == 0, res.stderr
    assert "backend numpy     available" in res.stdout


def test_demo_passes_small():
    res = _run("demo", "--size", "12", "--backend", "numpy")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "demo passed" in res.stdout and res.stdout.count(" OK") == 2
    # each timing names what it is compared with
    assert "(scipy.signal.convolve " in res.stdout
    assert "(reference: scipy.signal.correlate per channel pair " in res.stdout


def test_demo_exit_code_on_failed_check(monkeypatch, capsys):
    monkeypatch.setattr(_cli, "DEMO_TOLERANCE", -1.0)      # no error can pass
    assert _cli.demo(size=8, backend="numpy") == 1
    assert "FAILED (2 checks)" in capsys.readouterr().out


def test_unknown_flag_is_an_error():
    res = _run("info", "--bogus")
    assert res.returncode == 2 and "unrecognized arguments: --bogus" in res.stderr


def test_build_one_group(tmp_path, monkeypatch):
    pytest.importorskip("cupy")
    from cupyconv._compile import _nvrtc
    try:
        _nvrtc.nvrtc_version()
    except Exception as exc:        # no NVRTC library here
        pytest.skip(f"NVRTC unavailable: {exc}")
    env_dir = str(tmp_path)
    monkeypatch.setenv("CUPYCONV_CACHE_DIR", env_dir)
    res = _run("build", "--arch", "sm_90", "--ranks", "1", "--families", "vol2col",
               "--dtypes", "float64")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "vol2col<double, 1, int>" in res.stdout
    assert any(f.endswith(".cubin") for _, _, fs in os.walk(env_dir) for f in fs)


@pytest.mark.parametrize("argv, flag, allowed", [
    (["--ranks", "3-1"], "--ranks", "1-8"),
    (["--ranks", ""], "--ranks", "1-8"),
    (["--ranks", "0-2"], "--ranks", "1..8"),
    (["--ranks", "1-9"], "--ranks", "1..8"),
    (["--ranks", "1,,2"], "--ranks", "1,2,3"),
    (["--arch", ""], "--arch", "sm_80,sm_90"),
    (["--arch", "sm_90,"], "--arch", "sm_NN"),
    (["--arch", "sm90"], "--arch", "sm_NN"),
    (["--arch", "compute_90"], "--arch", "sm_NN"),
    (["--arch", "sm_90/../x"], "--arch", "sm_NN"),
    (["--jobs", "0"], "--jobs", "positive integer"),
])
def test_build_rejects_bad_flags(argv, flag, allowed, capsys):
    """A flag that would build nothing (or something unloadable) is a usage error, exit 2."""
    from cupyconv._compile.build import main
    with pytest.raises(SystemExit) as info:
        main(argv + ["--quiet"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err and allowed in err, err


def test_build_flag_parsers():
    from cupyconv._compile.build import parse_archs, parse_ranks
    assert parse_ranks("1-3,5,2") == [1, 2, 3, 5] and parse_ranks("8") == [8]
    assert parse_archs("sm_80, sm_90,sm_80") == ["sm_80", "sm_90"]
    assert parse_archs("sm_120") == ["sm_120"]


def test_build_api_rejects_empty_work():
    from cupyconv._compile import build
    for kwargs in (dict(archs=()), dict(archs=("sm_9",)), dict(ranks=())):
        with pytest.raises(ValueError):
            build(progress=False, **kwargs)


def test_version_flag_prints_the_package_version(capsys):
    import cupyconv
    from cupyconv.__main__ import main
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"cupyconv {cupyconv.__version__}"
    res = _run("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"cupyconv {cupyconv.__version__}"


def test_build_without_nvrtc_says_so_before_any_progress(monkeypatch, capsys):
    """No NVRTC: one line naming it, exit 1, and no compile started (no bar drawn)."""
    build_module = importlib.import_module("cupyconv._compile.build")

    def missing():
        raise build_module.NvrtcUnavailable("NVRTC library not found (pip install ...)")

    def no_compile(*args, **kwargs):
        raise AssertionError("the build started without NVRTC")
    monkeypatch.setattr(build_module, "nvrtc_version", missing)
    monkeypatch.setattr(build_module, "compile_groups", no_compile)
    assert build_module.main(["--arch", "sm_90", "--ranks", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("cannot build: NVRTC not found (") and "\r" not in err


def test_build_help_gives_the_defaults_and_the_kernel_count(capsys):
    build_module = importlib.import_module("cupyconv._compile.build")
    from cupyconv._kernels import registry
    with pytest.raises(SystemExit):
        build_module.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    work = build_module.group_work(build_module.DEFAULT_ARCHS, range(1, registry.MAX_RANK + 1))
    count = sum(len(members) for _, _, members in work)
    assert f"With the defaults: {count:,} kernels in {len(work)} NVRTC programs" in out
    assert f"(default: {','.join(build_module.DEFAULT_ARCHS)})" in out
    assert f"(default: 1-{registry.MAX_RANK})" in out
    assert "(default: the CPU count)" in out
