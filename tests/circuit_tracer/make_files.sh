#!/usr/bin/env bash
# Build circuit-tracer 0.5.0's own venv (upstream's tested pins) and let circuit-tracer write its graphs to OUT.
# Usage: bash tests/circuit_tracer/make_files.sh OUT [VENV]
# Then, in the project's venv: CIRCUIT_TRACER_FILES=OUT python -m pytest tests/circuit_tracer
# VENV (default OUT/venv-ct) is reused when it already has circuit-tracer; remove it to rebuild.
set -euo pipefail
out="$(realpath -m "${1:?usage: make_files.sh OUT [VENV]}")"
venv="$(realpath -m "${2:-$out/venv-ct}")"
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
started=$(date +%s)
if ! "$venv/bin/python" -c "import circuit_tracer" 2>/dev/null; then
  python3.11 -m venv "$venv" 2>/dev/null || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q torch==2.13.0   # the CPU wheel; a plain `torch` would pull a CUDA build
  "$venv/bin/python" -m pip install -q circuit-tracer==0.5.0 nnsight==0.6.1 transformers==4.57.3 \
    'transformer-lens==2.16.*' 'huggingface-hub<1'
  echo "circuit-tracer venv installed in $(( $(date +%s) - started )) s"
fi
mkdir -p "$out"
"$venv/bin/python" tests/circuit_tracer/generate.py "$out"
echo "circuit-tracer files written in $(( $(date +%s) - started )) s"
