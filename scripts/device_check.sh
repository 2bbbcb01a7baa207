#!/usr/bin/env bash
# One prepared check for a lent GPU machine (H200: Python 3.12, CuPy 14 for CUDA 13,
# NumPy, SciPy, pytest, hypothesis, PyTorch, JAX; no internet, no pip installs).
#
#   PYTHONPATH=. OUT=/some/dir bash scripts/device_check.sh
#
# Run from the repository root.  Every step is time-boxed with `timeout`, and the steps
# together with a deadline: BUDGET seconds (default 420) from the start, a step getting
# no more than what is left and skipped (recorded SKIPPED) when under 10 s is, so the
# script ends within BUDGET + the summary's 30 s, under 8 minutes, however the steps
# fare.  The steps run in the order of what the open issues need most.  A failing or
# hanging step is recorded and the script goes on.  Writes under $OUT (2 folders deep):
#   device_check.log          full output of every step
#   steps.tsv                 step, status, exit code, seconds
#   glue_smoke.json           every kernel family x rank 1-3 x dtype on CuPy arrays vs NumPy
#   reference_cases.json      the issue's reference layers vs cuDNN/cupyx, % of FP32 peak
#   tensor_cores.json         float64 (DMMA) / TF32 / float16 tiles vs cuDNN, % of tensor peak
#   ndimage_gpu.json          cupyconv.ndimage vs cupyx.scipy.ndimage; separable vs fft
#   graph_replay.json         compiled calls replayed as one CUDA graph against plain replay
#                             (3-pass gaussian_filter, a gemm layer): decides config.cuda_graphs
#   splitk_gpu.json           the weight gradient's split-K: unsplit vs the cost model's S
#   device_micro.json         mma.sync issue rate per atom (HMMA f16/bf16/TF32, DMMA m8n8k4,
#                             m16n8k16 on sm_90), L2 and HBM copy bandwidth (issue 26)
#   (the Winograd GPU table is in device_check.log)
#   bench/all_quick_cuda.{json,md,_speedup.png,_roofline.png}
#   (the per-call profile of small calls is in device_check.log)
# and prints a short summary table LAST.
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
BUDGET=${BUDGET:-420}
START=$(date +%s)

step() {   # step NAME LIMIT_SECONDS COMMAND...
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

TESTS=(tests/backends/cuda tests/api tests/examples tests/toolchain)
# the device's sm_NN (the build step compiles for it alone)
ARCH=$("$PY" -c "import cupy; print('sm_' + cupy.cuda.Device().compute_capability)" \
       2>/dev/null || echo sm_90)

# A cold kernel cache made the first run's steps spend their time in NVRTC (one implicit
# GEMM group: 6-9 s): compile every kernel of ranks 1-5 first, in parallel on all cores
# (`python -m cupyconv build`), into the user cache the later steps load from.
step info 10 "$PY" -m cupyconv info
step warm-cache 70 "$PY" -m cupyconv build --arch "$ARCH" --ranks 1-5 --quiet
# The glue (params struct by value, mangled names, loader, streams): one launch per
# kernel family x rank 1-3 x dtype, compared with the NumPy backend.
step glue-smoke 35 "$PY" -m benchmarks.glue_smoke --backend cuda --ranks 1-3 \
    --out "$OUT/glue_smoke.json"
step gpu-tests 90 "$PY" -m pytest -m gpu -q -p no:cacheprovider -rf "${TESTS[@]}"
step demo 15 "$PY" -m cupyconv demo
# issue 24: the quick suite against cupyx, JAX, cuDNN and the recursive conv3d, per call
# host and device time and syncs; then ndimage against cupyx
step bench 50 "$PY" -m cupyconv bench --quick --backend cuda --out "$OUT/bench"
# issue 13: cupyconv.ndimage against cupyx.scipy.ndimage, separable against fft (40^4 * 7^4)
step ndimage 35 "$PY" -m benchmarks.ndimage_gpu --budget 1 --json "$OUT/ndimage_gpu.json"
# issues 13 and 15: where a small call's time goes, host against device (conv, convolve, a
# 3-pass ndimage filter, the 96^3 * 5^3 ndimage correlation that took 1.84 ms against
# cupyx's 0.10, a Winograd layer); early, so a slow later step cannot crowd it out
step profile 25 "$PY" -m benchmarks.profile_call --backend cuda --calls 50 --top 15
# issue 26: what limits each tile -- the mma.sync rate of every atom (independent MMAs per
# warp, CUDA events and clock64) and the L2 / HBM copy bandwidth (cuda_src/bench/device_micro.cu)
step micro 60 "$PY" -m benchmarks.device_micro --out "$OUT"
# issue 24 part 3: graphed against plain replay of a 3-pass gaussian_filter and a gemm
# layer (host, device and loop time per call; bit-equal results; why not graphed)
step graph-replay 30 "$PY" -m benchmarks.graph_replay --out "$OUT" --repeat 200
# the reference layers against cuDNN (TF32 off) and cupyx; writes the measured
# efficiencies the GPU cost model loads (and $OUT/reference_cases.json)
step reference 60 "$PY" -m benchmarks.reference_cases --out "$OUT" --budget 5
# issue 12: the tensor-core tiles against cuDNN float64 / TF32 / float16 and a 4-D layer;
# merges the fitted implicit_gemm_tc_* / gemm_tc_* efficiencies into the cost model's file;
# also times method="auto" and the channels-last (16-byte copy) tiles
step tensor-cores 60 "$PY" -m benchmarks.tensor_cores --out "$OUT" --budget 2
# issue 26 item 2: the weight gradient's split-K against the unsplit implicit GEMM and gemm
# (the 3-D 64-channel layer, a 2-D one; float32, TF32, float64)
step splitk 30 "$PY" -m benchmarks.splitk_gpu --out "$OUT" --budget 0.5
# issue 15: the Winograd transform kernels against our implicit GEMM, gemm and cuDNN
step winograd 20 "$PY" -m benchmarks.winograd_gpu --small --rounds 5
rm -f "$TMP"

echo
echo "===== summary"
timeout 30 "$PY" -c "from cupyconv._bench.report import print_summary as p; \
p('$OUT/bench/all_quick_cuda.json', '$STEPS', '$OUT/device_micro.json')" || cat "$STEPS"
