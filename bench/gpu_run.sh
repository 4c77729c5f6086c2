#!/usr/bin/env bash
# On a GPU machine that reaches no package index: install the wheels bench/gpu_wheels.sh made
# (into /tmp/site, nothing system-wide), then the GPU benchmark, then, with TESTS=1, the
# CUDA variants of the precision tests.
#
# usage: bench/gpu_run.sh OUT [WHEELS]   (from the repository root; WHEELS default .whl)
#   env ARGS    more options for bench/gpu.py (e.g. "--rounds 2", "--dry-run")
#       TESTS   1: also pytest -k cuda tests/test_half_models.py tests/test_precision.py
#               (needs pytest and hypothesis on that machine)
set -euo pipefail
OUT=${1:?usage: bench/gpu_run.sh OUT [WHEELS]}
WHEELS=${2:-.whl}
ls "$WHEELS"/*.whl >/dev/null || { echo "no wheels in $WHEELS: run bench/gpu_wheels.sh" >&2; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site "$WHEELS"/*.whl
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$OUT"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
# shellcheck disable=SC2086
python3 bench/gpu.py --out "$OUT" ${ARGS:-} 2>&1 | tee "$OUT/bench.log"
if [ "${TESTS:-0}" = 1 ]; then
  python3 -m pytest -q -p no:cacheprovider -k cuda tests/test_half_models.py tests/test_precision.py \
    2>&1 | tail -40 > "$OUT/cuda_tests.log"
fi
