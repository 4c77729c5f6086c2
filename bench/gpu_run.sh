#!/usr/bin/env bash
# On a GPU machine that reaches no package index: install the wheels bench/gpu_wheels.sh made
# (into /tmp/site, nothing system-wide); then, with TESTS=1, the CUDA tests; with PROBE=1,
# bench/gpu_probe.py (one process per model); then the GPU benchmark.
# At most 8 files land in OUT: probe.json, probe.log, results.json, summary.md, bench.log,
# failed_train.log, failed_decodes.log, cuda_tests.log.
#
# usage: bench/gpu_run.sh OUT [WHEELS]   (from the repository root; WHEELS default .whl)
#   env ARGS        more options for bench/gpu.py (e.g. "--rounds 2", "--deadline-s 300")
#       PROBE       1: run bench/gpu_probe.py first; PROBE_ARGS, more options for it;
#                   PROBE_MODELS, its models (default "lstm global local-p"), one process each
#       TESTS       1: also tests/test_cuda_step.py and tests/test_cuda_graphs.py (not the slow
#                   ones; stopped after 90 s), then pytest -k cuda tests/test_half_models.py
#                   tests/test_precision.py (needs pytest on that machine; the CUDA image has it)
#       TESTS_S     the seconds the second group may take (default 300; stopped with SIGINT,
#                   pytest still prints its failures and summary; 0: not run)
#       END_S       when set: gpu.py's --deadline-s is END_S minus the seconds this script has
#                   run so far (its last run ends after that)
set -euo pipefail
OUT=${1:?usage: bench/gpu_run.sh OUT [WHEELS]}
WHEELS=${2:-.whl}
ls "$WHEELS"/*.whl >/dev/null || { echo "no wheels in $WHEELS: run bench/gpu_wheels.sh" >&2; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site "$WHEELS"/*.whl
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$OUT"
nvidia-smi 2>&1 | tee "$OUT/bench.log" || true
if [ "${TESTS:-0}" = 1 ]; then  # first: they check the code the figures below measure
  timeout -s INT -k 5 90 python3 -m pytest -q -rA --tb=short -p no:cacheprovider -m "not slow" \
    tests/test_cuda_step.py tests/test_cuda_graphs.py >> "$OUT/cuda_tests.log" 2>&1 || true
  [ "${TESTS_S:-300}" = 0 ] || timeout -s INT -k 5 "${TESTS_S:-300}" python3 -m pytest -q -rfE --tb=short -p no:cacheprovider \
    -k cuda tests/test_half_models.py tests/test_precision.py 2>&1 | tail -80 >> "$OUT/cuda_tests.log" || true
fi
if [ "${PROBE:-0}" = 1 ]; then
  # shellcheck disable=SC2086
  for model in ${PROBE_MODELS:-lstm global local-p}; do  # a failed capture cannot reach the next
    # shellcheck disable=SC2086
    python3 bench/gpu_probe.py --out "$OUT" --models "$model" ${PROBE_ARGS:-} 2>&1 \
      | grep -v '^INFO' | tee -a "$OUT/probe.log" || true
  done
fi
DEADLINE=()
[ -n "${END_S:-}" ] && DEADLINE=(--deadline-s "$((END_S - SECONDS))")
# shellcheck disable=SC2086
python3 bench/gpu.py --out "$OUT" ${ARGS:-} "${DEADLINE[@]}" 2>&1 | tee -a "$OUT/bench.log"
