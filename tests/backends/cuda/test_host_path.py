"""The CUDA path's host-side caches (issues 13 and 15: small calls were host-bound on the
GPU): device constants copied once per runner, launch geometry and Winograd plans
memoised, the N-D weight transform as one GEMM.  Checked on the emulated runner (the
same orchestration as CuPy's)."""
from __future__ import annotations

import collections
import os
from pathlib import Path

import numpy as np
import pytest

import cupyconv
from cupyconv import config
from cupyconv._emulation import EmulatedFunction
from cupyconv.backends import winograd_conv
from cupyconv.backends.cuda import CudaBackend
from cupyconv.backends.cuda.runners import CONSTANT_BYTES, EmulatedRunner
from cupyconv.core.problem import ConvProblem
from cupyconv.core.winograd import transforms
from cupyconv.dispatch import device_constant

try:
    from benchmarks import host_path
except ImportError:          # benchmarks/ is not on the path
    host_path = None


def test_constants_are_copied_once_and_read_only():
    runner = EmulatedRunner()
    taps = np.array([1.0, 2.0, 1.0])
    first = runner.constant(taps)
    assert runner.constant(taps.copy()) is first            # by value, not identity
    assert not first.flags.writeable
    np.testing.assert_array_equal(first, taps)
    assert runner.constant(taps.astype(np.float32)) is not first      # dtype in the key
    assert runner.constant(taps.reshape(3, 1)).shape == (3, 1)         # shape in the key
    taps[0] = 5.0                                            # the caller's array is free
    np.testing.assert_array_equal(first, [1.0, 2.0, 1.0])


def test_large_arrays_are_not_kept():
    runner = EmulatedRunner()
    big = np.zeros(CONSTANT_BYTES // 8 + 1)
    assert runner.constant(big) is big          # xp.asarray's own (NumPy: the array itself)
    small = np.zeros(4)
    assert runner.constant(small) is not small  # a kept, read-only copy


def test_device_constant_leaves_numpy_arrays_alone():
    taps = np.arange(3.0)
    assert device_constant(np, taps) is taps


def test_with_returns_the_problem_when_nothing_changes():
    p = ConvProblem.create(x_shape=(1, 1, 8, 8), w_shape=(1, 1, 3, 3), dtype=np.float32)
    assert p.with_(layout=p.layout, dtype=np.dtype(np.float32)) is p
    q = p.with_(dtype=np.dtype(np.float64))
    assert q is not p and q.dtype == np.float64


def test_the_backend_device_does_not_query_free_memory():
    """Launch-time reads (shared memory, arch) take the static info; the memory checks
    still see the (emulated) free memory."""
    tight = EmulatedRunner(memory_limit=1000)
    backend = CudaBackend(tight)
    assert backend.device is tight.static
    assert backend.available_memory() == 1000


@pytest.mark.parametrize("kron_bytes", [winograd_conv.KRON_BYTES, 0])   # 0: axis by axis
@pytest.mark.parametrize("tile,taps", [((2, 4), (3, 3)), ((2, 2, 2), (3, 2, 3)),
                                       ((4,), (5,)), ((1, 2), (1, 3))])
def test_the_kronecker_weight_transform_is_g_along_every_axis(rng, tile, taps, kron_bytes,
                                                              monkeypatch):
    monkeypatch.setattr(winograd_conv, "KRON_BYTES", kron_bytes)
    w = rng.standard_normal((4, 3) + taps)
    ref = w
    for a, (m, r) in enumerate(zip(tile, taps)):        # G along axis 2 + a
        g = transforms(m, r).arrays(np.float64)[1]
        ref = np.moveaxis(np.tensordot(ref, g, axes=([2 + a], [1])), -1, 2 + a)
    ref = np.moveaxis(ref.reshape(4, 3, -1), -1, 0).reshape(-1, 2, 2, 3)  # (P, G, K/G, Cg)
    u = winograd_conv.transform_weights(w, 2, tile, np.float64, np)
    np.testing.assert_allclose(u, ref, rtol=1e-14, atol=1e-14)
    assert u.flags.c_contiguous


def test_memoised_plans_follow_the_error_limit(restore_config):
    p = ConvProblem.create(x_shape=(1, 4, 16, 16, 16), w_shape=(4, 4, 3, 3, 3), padding=1,
                           dtype=np.float32)
    wide = winograd_conv.plan_tiles(p)
    assert winograd_conv.plan_tiles(p) is wide                  # memoised
    config.winograd_max_error_growth = 1.0
    assert isinstance(winograd_conv.plan_tiles(p), str)         # the limit is in the key
    config.winograd_max_error_growth = None
    assert winograd_conv.plan_tiles(p) is wide


@pytest.mark.skipif(host_path is None, reason="benchmarks/ is not importable")
def test_host_path_counts_launches_without_running_them():
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("the emulated backend is not available here")
    counts = collections.Counter()
    before = [vars(EmulatedFunction)["__call__"],
              vars(EmulatedRunner)["matmul"], vars(EmulatedRunner)["workspace"]]
    x = np.ones((32, 32, 32), np.float32)
    with cupyconv.use_backend("emulated"), host_path.stubbed(counts):
        y = cupyconv.ndimage.gaussian_filter(x, 1.5)
    assert counts["launches"] == 3 and y.shape == (32, 32, 32)
    assert before == [vars(EmulatedFunction)["__call__"],   # restored as they were
                      vars(EmulatedRunner)["matmul"], vars(EmulatedRunner)["workspace"]]
    with cupyconv.use_backend("emulated"):
        np.testing.assert_allclose(cupyconv.ndimage.gaussian_filter(x, 1.5), 1, rtol=1e-5)


@pytest.mark.skipif(host_path is None, reason="benchmarks/ is not importable")
def test_host_path_baseline_side_is_the_commits_package_with_these_cases():
    """``--baseline REF``: REF's ``cupyconv`` and ``cuda_src`` beside this checkout's
    ``benchmarks`` (both sides time the same cases and stubs); each side's figure is the
    median of its turns."""
    import shutil
    import subprocess
    root = Path(host_path.__file__).resolve().parents[1]
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True).returncode:
        pytest.skip("not a git checkout")
    tree, commit = host_path._baseline_tree("HEAD")
    try:
        assert {"cupyconv", "cuda_src", "benchmarks"} <= set(os.listdir(tree)) and commit
        assert (Path(tree) / "benchmarks" / "host_path.py").read_text() == \
            Path(host_path.__file__).read_text()
    finally:
        shutil.rmtree(tree)
    turns = [[dict(case="a", today_us=t, first_us=2 * t, chosen_us=4 * t, second_us=5 * t,
                   repeated_us=3 * t, today=_NONE, repeated=_NONE, path="compiled")]
             for t in (1, 5, 2)]
    (row,) = host_path._median_rows(turns)
    assert (row["today_us"], row["first_us"], row["chosen_us"], row["second_us"],
            row["repeated_us"]) == (2, 4, 8, 10, 6)
    # the baseline's first calls (both kinds), second and repeated calls beside ours, with
    # ratios
    theirs = dict(row, first_us=8.0, chosen_us=16.0, second_us=5.0, repeated_us=6.0)
    header, _, line = host_path.table([row], {"a": theirs}, "abc1234")
    assert ("abc1234 first us | ratio | abc1234 first, choice unmade us | ratio | "
            "abc1234 second us | ratio | abc1234 repeated us | ratio |") in header
    assert line.endswith("| 8.0 | 0.50 | 16.0 | 0.50 | 5.0 | 2.00 | 6.0 | 1.00 |")


#: A row's counts where nothing ran.
_NONE = dict.fromkeys(("launches", "gemms", "allocations", "syncs", "d2h", "h2d"), 0)
