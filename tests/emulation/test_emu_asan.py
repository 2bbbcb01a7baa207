"""ASan + UBSan mode catches planted memory errors (in a preloaded subprocess)."""
import numpy as np
import pytest

from cupyconv._emulation import EmulatedModule, EmulationError, asan_preloaded, build_module
from emulation_support import require_asan, require_emulation, run_in_asan_subprocess

# Child program: {path}, {names} and {launch} are filled in per case.
CHILD = """
import numpy as np
from cupyconv._emulation import EmulatedModule
mod = EmulatedModule(path={path!r}, name_expressions={names!r}, mode="asan")
f = mod.get_function
i32 = np.int32
{launch}
print("CHILD-OK", flush=True)
"""

CASES = {
    "heap-buffer-overflow": "x = np.arange(1000, dtype=np.float32)\n"
                            "f('read_past_end')(1, 32, (x, np.zeros(1, np.float32), i32(1000)))",
    "global-buffer-overflow": "x = np.arange(32, dtype=np.float32)\n"
                              "f('static_shared_overrun')(1, 32, (x, np.zeros_like(x)))",
    "dynamic shared": "f('dynamic_shared_overrun')(1, 32, (np.zeros(1, np.float32), i32(32)),"
                      " shared_mem=32 * 4)",
    "signed integer overflow": "x = np.arange(32, dtype=np.int32)\n"
                               "f('signed_overflow')(1, 32, (x, np.zeros_like(x)))",
}
# Any of these reports proves detection (UBSan's bounds / object-size checks may
# fire before ASan's shadow check for the same access).
EXPECTED = {
    "heap-buffer-overflow": ("AddressSanitizer: heap-buffer-overflow",),
    "global-buffer-overflow": ("AddressSanitizer: global-buffer-overflow",
                               "runtime error: load of address"),
    "dynamic shared": ("AddressSanitizer: heap-buffer-overflow",
                       "runtime error: load of address"),
    "signed integer overflow": ("runtime error: signed integer overflow",),
}


@pytest.fixture(scope="module")
def run_case(kernel_path, name_expressions):
    """``run_case(launch_code)``: run a launch of asan.cu in a preloaded child."""
    require_asan()
    path = str(kernel_path("asan.cu"))
    names = name_expressions["asan.cu"]
    build_module(path=path, name_expressions=names, mode="asan")  # compile once, here

    def run(launch: str):
        return run_in_asan_subprocess(CHILD.format(path=path, names=names, launch=launch))
    return run


@pytest.mark.parametrize("case", sorted(CASES))
def test_planted_error_is_reported(run_case, case):
    proc = run_case(CASES[case])
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "CHILD-OK" not in proc.stdout
    assert any(report in proc.stderr for report in EXPECTED[case]), proc.stderr[-3000:]


def test_correct_kernel_is_clean(run_case):
    proc = run_case("x = np.arange(100, dtype=np.float32); y = np.zeros_like(x)\n"
                    "f('copy_through_shared')(2, 64, (x, y, i32(100)))\n"
                    "assert (y == x).all()\n"
                    "f('copy_through_shared')(2, 64, (x, y, i32(100)))")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "CHILD-OK" in proc.stdout
    assert "ERROR: AddressSanitizer" not in proc.stderr


def test_asan_module_needs_preloaded_runtime(kernel_path):
    require_emulation()
    if asan_preloaded():
        pytest.skip("this interpreter already runs with the ASan runtime")
    with pytest.raises(EmulationError, match="LD_PRELOAD"):
        EmulatedModule(path=kernel_path("asan.cu"), name_expressions=["read_past_end"],
                       mode="asan")


def test_error_paths_are_clean_under_asan(kernel_path):
    """Abandoned fibers and recycled stacks raise no false ASan reports."""
    require_asan()
    path = str(kernel_path("errors.cu"))
    names = ["divergent_barrier", "early_exit", "shuffle_after_exit", "neighbour<true>"]
    code = f"""
import numpy as np
from cupyconv._emulation import EmulatedModule, EmulationError
mod = EmulatedModule(path={path!r}, name_expressions={names!r}, mode="asan")
y = np.zeros(64, np.int32)
for name in {names[:3]!r} * 3:
    try:
        mod.get_function(name)(2, 64, (y,))
    except EmulationError:
        pass
    else:
        raise SystemExit(name + " did not fail")
x = np.arange(256, dtype=np.float32)
z = np.zeros_like(x)
mod.get_function("neighbour<true>")(2, 128, (x, z), shared_mem=512)
assert (z[:128] == np.roll(x[:128], -1)).all()
print("CHILD-OK", flush=True)
"""
    proc = run_in_asan_subprocess(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "CHILD-OK" in proc.stdout
