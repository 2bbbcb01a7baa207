"""The device microbenchmark step (issue 26 item 7): cuda_src/bench/device_micro.cu compiles
under NVRTC to the tensor-core instructions it is meant to time, its driver
(benchmarks/device_micro.py) runs on the emulated runner at a tiny size and computes what it
should, and scripts/device_check.sh runs it and prints it."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "toolchain"))

from benchmarks import device_micro  # noqa: E402
from toolchain_support import nvrtc_available  # noqa: E402

#: the SASS opcode of each atom's mma on sm_80 / sm_90
OPCODES = {"MmaF16_m16n8k16": ("HMMA.16816.F32", "HMMA.16816.F32"),
           "MmaBf16_m16n8k16": ("HMMA.16816.F32.BF16", "HMMA.16816.F32.BF16"),
           "MmaTf32_m16n8k8": ("HMMA.1688.F32.TF32", "HMMA.1688.F32.TF32"),
           "MmaF64_m8n8k4": ("DMMA.884", "DMMA.8x8x4"),
           "MmaF64_m16n8k16": (None, "DMMA.16x8x16")}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_microbenchmark_compiles_to_the_timed_instructions(arch, tmp_path):
    if not nvrtc_available():
        pytest.skip("NVRTC unavailable")
    from cupyconv._compile import _nvrtc, sass
    from cupyconv._compile.build import compile_options, parse_ptxas_log
    from cupyconv._paths import cuda_src_dir
    cc = int(arch[3:])
    names = [device_micro.mma_name(a) for a in device_micro.atoms_for(cc)] + ["copy_bandwidth"]
    source = cuda_src_dir() / device_micro.SOURCE
    binary, log, lowered = _nvrtc.compile_program(
        source.read_text(), str(source), compile_options(arch) + (f"-I{cuda_src_dir()}",), names)
    usage = parse_ptxas_log(log)
    assert all(usage[lowered[n]]["spill_stores"] == 0 for n in names)
    if sass.disassembler_reason() is not None:
        pytest.skip(f"compiled; SASS not checked: {sass.disassembler_reason()}")
    cubin = tmp_path / "micro.cubin"
    cubin.write_bytes(binary)
    funcs = sass.disassemble(cubin)
    for atom in device_micro.atoms_for(cc):
        ops = [i.opcode for i in funcs[lowered[device_micro.mma_name(atom)]]]
        want = OPCODES[atom][cc >= 90]
        mma = [op for op in ops if op.startswith(("HMMA", "DMMA"))]
        # the chains unrolled: at least CHAINS independent MMAs of the one instruction
        assert set(mma) == {want} and len(mma) >= device_micro.CHAINS, (atom, mma)
    copy_ops = [i.opcode for i in funcs[lowered["copy_bandwidth"]]]
    assert any(op.startswith("LDG") and ".128" in op for op in copy_ops), copy_ops
    assert any(op.startswith("STG") and ".128" in op for op in copy_ops), copy_ops


def test_driver_runs_on_the_emulator(tmp_path, capsys):
    from emulation_support import require_emulation
    require_emulation()
    assert device_micro.main(["--backend", "emulated", "--tiny", "--out", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "device_micro.json").read_text())
    rows = {r.get("atom", r.get("level")): r for r in out["rows"]}
    assert set(rows) == set(device_micro.ATOMS) | {"l2", "hbm"}
    iters = device_micro.TINY["iters"]
    for atom, (_, _, mnk, _) in device_micro.ATOMS.items():
        r = rows[atom]
        assert r["seconds"] > 0 and r["tflops"] > 0 and r["clock64_per_mma_per_warp"] > 0
        # every accumulator element gained K * a * b per MMA: CHAINS chains, kCRegs each
        k = mnk // (16 * 8) if "m16n8" in atom else 4
        a_b = 2.0 ** -14 if atom == "MmaF16_m16n8k16" else 2.0 ** -30   # MicroOperands
        c_regs = 2 if atom == "MmaF64_m8n8k4" else 4
        assert r["sink_mean"] == pytest.approx(device_micro.CHAINS * c_regs * iters * k * a_b), atom
    for level in ("l2", "hbm"):
        assert rows[level]["copied"] and rows[level]["gbps"] > 0
    printed = capsys.readouterr().out.splitlines()
    assert len([line for line in printed if line.startswith("micro ")]) == len(out["rows"])


def test_device_check_runs_and_prints_the_micro_step():
    script = (ROOT / "scripts" / "device_check.sh").read_text()
    steps = re.findall(r"^step (\S+) (\d+) (.*)$", script, flags=re.M)
    micro = [s for s in steps if s[0] == "micro"]
    assert micro and "-m benchmarks.device_micro --out \"$OUT\"" in micro[0][2]
    assert int(micro[0][1]) <= 60                              # about a minute of device time
    assert "device_micro.json" in script.split("===== summary")[1]   # in the printed table


def test_device_check_keeps_to_its_deadline(tmp_path):
    """The script's steps share one deadline (``BUDGET``, default under 8 minutes with the
    summary's 30 s): a step gets at most what is left, and none is started when too little
    is.  With no budget at all every step is recorded SKIPPED and the script still ends
    (run with ``true`` standing in for Python: no step does any work)."""
    import subprocess
    from limits import child_limit
    script = (ROOT / "scripts" / "device_check.sh").read_text()
    budget = int(re.search(r"^BUDGET=\$\{BUDGET:-(\d+)\}$", script, flags=re.M).group(1))
    summary = int(re.search(r"^timeout (\d+) \"\$PY\"", script, flags=re.M).group(1))
    assert budget + summary <= 8 * 60
    steps = re.findall(r"^step (\S+) (\d+) ", script, flags=re.M)
    env = dict(PATH="/usr/bin:/bin", OUT=str(tmp_path), PYTHON="true", BUDGET="0")
    subprocess.run(["bash", str(ROOT / "scripts" / "device_check.sh")], env=env, check=True,
                   capture_output=True, timeout=child_limit(units=len(steps), per_unit_s=1,
                                                            start_s=5))
    rows = [line.split("\t") for line in (tmp_path / "steps.tsv").read_text().splitlines()]
    assert [r[0] for r in rows] == [name for name, _ in steps]
    assert {r[1] for r in rows} == {"SKIPPED"}
