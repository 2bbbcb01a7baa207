#!/usr/bin/env bash
# The device check, second edition (issue 34): one prepared run for any single lent GPU
# (H100 80 GB or H200: Python, CuPy, NumPy, SciPy, pytest, PyTorch, JAX; no internet, no
# pip installs).
#
#   PYTHONPATH=. OUT=/some/dir bash scripts/device_check.sh
#
# Run from the repository root.  A hard deadline of 8 minutes: BUDGET seconds (default
# 450) from the start for the steps, each time-boxed with `timeout`, getting no more than
# what is left and skipped (SKIPPED) when under 10 s is, then the summary's 30 s.  Without
# a CUDA device every GPU step is recorded NO-GPU and the script still runs end to end.
# A failing or hanging step is recorded and the script goes on.  The steps, in this order:
#   1. warm-cache: every kernel of ranks 1-5 for the device's arch, and sm_90a on compute
#      capability 9.0, compiled in parallel on all cores; what could not build is in
#      warm_cache.txt
#   2. evidence: every ledger configuration (verified or not) at the sizes the CPU
#      stand-in of this device picks it for, plus a many-CTA / several channel tiles /
#      several groups / K-tail problem each, against an on-device float64 reference with
#      the tolerances of benchmarks/evidence_check.py; the 64-bit index instance on a
#      float16 array past 2**31 elements; bfloat16 wgmma (a ledger configuration); each
#      launch path on a kernel with more than 48 KiB of shared memory.  Writes
#      evidence.json: `python -m benchmarks.promote_evidence OUT/evidence.json` prints the
#      ledger rows of what passed (docs/evidence.md); then the GPU-marked tests (gpu-tests)
#   3. timings of the reference layers, written as the efficiencies the cost model reads
#      (reference, tensor-cores)
#   4. the peers' quick suite (bench)
#   then, while the budget lasts: the PyTorch adapter's layers (torch-layers; torchnd
#   too where .peers/ holds a copy), split-K, the micro-benchmarks, graph replay.
# Writes under $OUT (2 folders deep): device_check.log (every step's output), steps.tsv
# (step, status, exit code, seconds), warm_cache.txt, evidence.json,
# reference_cases.json, tensor_cores.json, bench/all_quick_cuda.*, torch_layers.md,
# splitk_gpu.json, device_micro.json, graph_replay.json; and prints a short summary table
# LAST.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false      # JAX must not grab the GPU's memory
OUT=${OUT:-/tmp/cupyconv_device_check}
PY=${PYTHON:-python}
mkdir -p "$OUT/bench"
LOG="$OUT/device_check.log"
STEPS="$OUT/steps.tsv"
: >"$LOG"
: >"$STEPS"
TMP=$(mktemp)
BUDGET=${BUDGET:-450}
START=$(date +%s)

step() {   # step NAME LIMIT_SECONDS COMMAND...  (GPU steps: NO-GPU without a device)
    local name=$1 limit=$2
    shift 2
    local t0 rc status left
    t0=$(date +%s)
    left=$(( BUDGET - (t0 - START) - 5 ))      # 5 s: timeout's kill grace
    if (( left < 10 )); then
        printf '%s\t%s\t%s\t%s\n' "$name" SKIPPED - 0 >>"$STEPS"
        echo "----- $name: SKIPPED (${left}s left of the ${BUDGET}s budget)" | tee -a "$LOG"
        return
    fi
    if [[ $name != info && $GPU != 1 ]]; then
        printf '%s\t%s\t%s\t%s\n' "$name" NO-GPU - 0 >>"$STEPS"
        echo "----- $name: NO-GPU (no CUDA device)" | tee -a "$LOG"
        return
    fi
    (( limit > left )) && limit=$left
    echo "===== $name (limit ${limit}s): $*" | tee -a "$LOG"
    timeout -k 5 "$limit" "$@" >"$TMP" 2>&1
    rc=$?
    cat "$TMP" >>"$LOG"
    tail -n 20 "$TMP"
    case $rc in
        0) status=ok ;;
        124|137) status=TIMEOUT ;;
        *) status=FAILED ;;
    esac
    printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$(( $(date +%s) - t0 ))" >>"$STEPS"
    echo "----- $name: $status (rc $rc)" | tee -a "$LOG"
}

# whether CuPy sees a CUDA device, and its sm_NN (the build step compiles for it)
ARCH=$("$PY" -c "import cupy; print('sm_' + cupy.cuda.Device().compute_capability)" \
       2>/dev/null)
if [[ $ARCH == sm_* ]]; then GPU=1; else GPU=0; ARCH=sm_90; fi
ARCHS=$ARCH
[[ $ARCH == sm_90 ]] && ARCHS=sm_90,sm_90a

step info 10 "$PY" -m cupyconv info
# 1. the cache, warmed in parallel on all cores (a cold one spent the first run's steps in
# NVRTC); the build's report, with what could not build, kept apart
step warm-cache 90 bash -c "\"\$0\" -m cupyconv build --arch $ARCHS --ranks 1-5 --quiet \
    2>&1 | tee \"$OUT/warm_cache.txt\"; exit \${PIPESTATUS[0]}" "$PY"
# 2. correctness of every ledger configuration at the sizes auto picks (evidence.json)
step evidence 140 "$PY" -m benchmarks.evidence_check --out "$OUT" --budget 95
# ... and the GPU-marked tests (launch glue, streams, DLPack, the PyTorch adapter's CUDA path)
GPU_TESTS=(tests/backends/cuda tests/api tests/torch_adapter tests/examples)
step gpu-tests 60 "$PY" -m pytest -m gpu -q -p no:cacheprovider -rf -x "${GPU_TESTS[@]}"
# 3. timings, written as the efficiencies the cost model reads (and the JSON files)
step reference 45 "$PY" -m benchmarks.reference_cases --out "$OUT" --budget 5
step tensor-cores 45 "$PY" -m benchmarks.tensor_cores --out "$OUT" --budget 2
# 4. the peers' quick suite
step bench 50 "$PY" -m cupyconv bench --quick --backend cuda --out "$OUT/bench"
# 5. the PyTorch adapter's layers (issue 36's GPU goals): against nn.Conv3d on the 3-D
# layer, and against torchnd on the 4-D/5-D ones where a copy was carried in .peers/
# (pip install --no-deps --target .peers torchnd unfoldnd einops: GPL peers, ignored by
# git, never committed)
step torch-layers 45 bash -c "PYTHONPATH=\"\$PYTHONPATH:.peers\" \"\$0\" \
    benchmarks/torch_layers.py --device cuda --rounds 5 --dtype float32 \
    | tee \"$OUT/torch_layers.md\"; exit \${PIPESTATUS[0]}" "$PY"
# while the budget lasts: the weight gradient's split-K, the micro-benchmarks (mma.sync
# issue rate per atom, L2 / HBM bandwidth), graphed against plain replay
step splitk 30 "$PY" -m benchmarks.splitk_gpu --out "$OUT" --budget 0.5
step micro 60 "$PY" -m benchmarks.device_micro --out "$OUT"
step graph-replay 30 "$PY" -m benchmarks.graph_replay --out "$OUT" --repeat 200
rm -f "$TMP"

echo
echo "===== summary"
timeout 30 "$PY" -c "from cupyconv._bench.report import print_summary as p; \
p('$OUT/bench/all_quick_cuda.json', '$STEPS', '$OUT/device_micro.json')" || cat "$STEPS"
