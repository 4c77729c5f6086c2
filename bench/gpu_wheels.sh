#!/usr/bin/env bash
# The wheels bench/gpu_run.sh installs on a GPU machine that reaches no package index but
# has a CUDA build of torch with numpy, sacrebleu, PyYAML, regex and sentencepiece:
# fairseq (ve-fairseq) and its pure-Python needs, for that machine's Python.
#
# usage: bench/gpu_wheels.sh [DIR]      (default .whl; run where pip reaches PyPI)
#   env PYVER    that machine's Python version (default 3.12; ve-fairseq has 3.11 and 3.12)
#       PYTHON   the pip to download with (default python3); any Python version works
set -euo pipefail
DIR=${1:-.whl}
PY=${PYTHON:-python3}
mkdir -p "$DIR"
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
# compiled: built for that CPython on x86-64
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "${PYVER:-3.12}" --implementation cp \
  "${PLATFORMS[@]}" -d "$DIR" ve-fairseq==0.12.3 bitarray==3.12.3
# pure Python, versions as requirements.txt pins them
"$PY" -m pip download -q --no-deps --only-binary=:all: -d "$DIR" \
  hydra-core==1.3.2 omegaconf==2.3.0 sacremoses==0.2.0
# published as a source archive only: built into a wheel here
"$PY" -m pip wheel -q --no-deps -w "$DIR" antlr4-python3-runtime==4.9.3
ls "$DIR"
