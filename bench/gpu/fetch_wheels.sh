#!/usr/bin/env bash
# Downloads what bench/gpu/h200.sh needs on the GPU machine, which has no network:
#   .whl_big/   nvidia-pytriton (55 MB: tritonserver 2.51), carried alone (stage `stash`)
#   .whl_gpu/   nvImageCodec and nvJPEG (28 MB), carried alone (stage `stash-gpu`)
#   .whl/pip/   cp312 wheels installed into the serving venv there (numpy<2 for the stub,
#               tritonclient and its HTTP deps, onnx2torch, py-spy for profiling the stub,
#               Pillow and tokenizers for the pipeline examples)
#   .whl/house/ the offline wheelhouse for scripts/setup.sh (perf_analyzer's tritonclient
#               2.41.0, libcudart.so.12) and Debian's libb64.so.0d
#   .whl/lean/  TensorRT's lean runtime, cp312 (47 MB), and a TensorRT-RTX engine built here
#               without a GPU: the stage `lean-runtime` alone, carried alone (carry .whl/lean)
# Both folders are ignored by git and travel with `carry`. Run here, where PyPI is reachable.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PY=${PYTHON:-.venv/bin/python}
platforms=(--platform manylinux_2_35_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64
           --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
           --platform manylinux1_x86_64)
fetch() {  # dest requirement...
  local dest=$1; shift
  mkdir -p "$dest"
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$dest" "$@"
}
fetch .whl_big nvidia-pytriton==0.7.0
# The serving venv: the image has torch, onnx, grpcio, protobuf, aiohttp, pytest, pytest-timeout.
fetch .whl/pip numpy==1.26.4 ml_dtypes==0.5.4 tritonclient==2.73.0 python-rapidjson geventhttpclient \
  gevent greenlet zope.event zope.interface brotli onnx2torch==1.5.15 py-spy==0.4.1 \
  pillow==13.0.0 tokenizers==0.23.3
# nvImageCodec and its nvJPEG (issue 28's GPU decode), carried in a call of their own (stage stash-gpu)
fetch .whl_gpu nvidia-nvimgcodec-cu13==0.9.0.20 nvidia-nvjpeg==13.3.2.43
fetch .whl/house tritonclient==2.41.0 nvidia-cuda-runtime-cu12==12.9.79
if [ ! -e .whl/house/libb64.so.0d ]; then
  cp .triton/lib/libb64.so.0d .whl/house/
fi
fetch .whl/lean tensorrt-lean-cu12-libs==11.4.0.106 tensorrt-lean-cu12-bindings==11.4.0.106
"$PY" bench/lean_runtime.py --write-rtx-engine .whl/lean/tiny_rtx.plan
du -sh .whl_big .whl_gpu .whl/pip .whl/house .whl/lean
