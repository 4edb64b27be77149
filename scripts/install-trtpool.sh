#!/usr/bin/env bash
# Install trtpool for a tritonserver: the one recipe of scripts/setup.sh (the
# development venv) and docker/Dockerfile (the image).
#
#   scripts/install-trtpool.sh PYTHON BACKENDS [--link] [-- PIP_INSTALL_ARGS...]
#
#   PYTHON    the python3 whose packages the Python backend stub imports
#   BACKENDS  tritonserver's backend directory: gets trtpool/model.py, the
#             backend that `backend: "trtpool"` in a config.pbtxt selects
#   --link    link model.py to this source tree (an editable install) instead of copying it
#   -- ...    `PYTHON -m pip install ...` first (no pip run without it)
#
# Then it checks what serving needs: numpy < 2 (tritonserver 2.51's stub hands
# tensors over through numpy 1's ABI), the packages, and every console script.
set -euo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS="trtpool-build trtpool-model trtpool-examples trtpool-accuracy trtpool-serve trtpool-health trtpool-tune"
die() { printf '[install] error: %s\n' "$*" >&2; exit 1; }

[ $# -ge 2 ] || die "usage: $0 PYTHON BACKENDS [--link] [-- PIP_INSTALL_ARGS...]"
python=$1 backends=$2
shift 2
link=0
if [ "${1:-}" = --link ]; then link=1; shift; fi
if [ "${1:-}" = -- ]; then
  shift
  "$python" -m pip install "$@"
fi

mkdir -p "$backends/trtpool"
if [ "$link" = 1 ]; then
  ln -sfn "$SRC/backend_src/model.py" "$backends/trtpool/model.py"
else
  rm -f "$backends/trtpool/model.py"
  install -m 0644 "$SRC/backend_src/model.py" "$backends/trtpool/model.py"
fi

"$python" - <<'PY' || die "$python cannot serve trtpool (above)"
import importlib.util
import numpy
assert int(numpy.__version__.split(".")[0]) < 2, f"numpy {numpy.__version__}: tritonserver 2.51's stub needs numpy < 2"
missing = [m for m in ("trtpool", "trtpool_builder", "trtpool_ops") if importlib.util.find_spec(m) is None]
assert not missing, f"not installed: {missing}"
PY
scripts=$("$python" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
for tool in $TOOLS; do
  [ -x "$scripts/$tool" ] || command -v "$tool" >/dev/null || die "console script $tool missing (looked in $scripts and PATH)"
done
