#!/usr/bin/env bash
# Install everything the test suite needs, then run it (the README's test command).
#
#   bash scripts/test.sh [pytest args...]
#
# - g++ and Boost.Context (fast fibers for the CUDA emulation layer) come from
#   apt when this runs as root on Debian/Ubuntu; without them the emulated
#   kernel tests fall back to glibc ucontext (slower) or are skipped.
# - The Python side is `pip install -e ".[test]"` (NumPy, SciPy, pytest,
#   hypothesis, mypy, CuPy + NVRTC for the ahead-of-time kernel compile tests;
#   no GPU is needed).
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
    if ! command -v g++ >/dev/null 2>&1 || [ ! -e /usr/include/boost/context/fiber.hpp ]; then
        echo "== installing g++ and libboost-context-dev (apt)"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ libboost-context-dev >/dev/null
    fi
fi

PY=${PYTHON:-python3}
echo "== pip install -e .[test]"
"$PY" -m pip install -q --disable-pip-version-check -e ".[test]"

# NVRTC 13 next to CuPy's 12, in its own folder (installed into the environment it
# would become the NVRTC that CuPy and cupyconv load): tests/toolchain/test_nvrtc13.py
# compiles every kernel family with it through CUPYCONV_NVRTC.
if ! ls .nvrtc13/nvidia/cu13/lib/libnvrtc.so.13* >/dev/null 2>&1; then
    echo "== pip install --target .nvrtc13 nvidia-cuda-nvrtc 13.x"
    "$PY" -m pip install -q --disable-pip-version-check --no-deps --target .nvrtc13 \
        "nvidia-cuda-nvrtc>=13,<14"
fi

echo "== import layers (import-linter contracts in pyproject.toml)"
lint-imports

echo "== types of the public API (mypy; [tool.mypy] in pyproject.toml)"
"$PY" -m mypy

echo "== pytest"
export CUPYCONV_HYPOTHESIS_PROFILE=${CUPYCONV_HYPOTHESIS_PROFILE:-ci}
exec "$PY" -m pytest -n "${PYTEST_WORKERS:-auto}" -q -p no:cacheprovider "$@"
