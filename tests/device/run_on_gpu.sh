#!/usr/bin/env bash
# The prepared device check: greedy SD == AR and DropMatch on a CUDA GPU through the real HF
# backend, on the tiny pair it builds itself (no network). <= 5 minutes. From anywhere:
#   tests/device/run_on_gpu.sh                 # cuda
#   tests/device/run_on_gpu.sh --device cpu    # the same logic on the CPU
# Python: $DROPMATCH_VENV/bin/python, else .venv/bin/python, else python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${DROPMATCH_VENV:-.venv}/bin/python"
[ -x "$PY" ] || PY=python3
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec timeout 300 "$PY" tests/device/gpu_check.py "$@"
