#!/usr/bin/env bash
# Runs trtpool's GPU tests and benchmarks on the lent H200 (no network there).
# Stages, in order, each given as an argument:
#   stash     keep the nvidia-pytriton wheel (.whl_big/) under $HOME/wh for later calls
#   setup     install the carried wheels (.whl/pip) into /tmp/site and run scripts/setup.sh offline
#   tests     the gpu-marked tests (torch runtime in-process, cuda.py, served GPU instances)
#   inprocess bench/inprocess.py for resnet50 and bert_base, fp16, contexts 1,2,4,8 x batch 1,8,32
#   serving   bench/gpu_serving.py (perf_analyzer, latency at 50/90% of peak, memory)
# Results go to $OUT (the device tool brings them back).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/backend_src:$PWD/builder:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"

for stage in "$@"; do
  echo "=== $stage $(date -u +%H:%M:%S)"
  case $stage in
    stash)
      mkdir -p "$HOME/wh" && cp .whl_big/*.whl "$HOME/wh/"
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
      python3 -c 'import sys, torch, numpy, onnx, onnxruntime; print(sys.version, torch.__version__, numpy.__version__, onnx.__version__, onnxruntime.__version__)'
      ;;
    setup)
      ls "$HOME"/wh/nvidia_pytriton-*.whl >/dev/null || { echo "NO PYTRITON WHEEL: run stash first"; exit 3; }
      # Into the image's own environment (numpy 1.26 replaces 2.x there), and a .pth
      # for trtpool's sources: the Python backend stub does not take PYTHONPATH.
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade .whl/pip/*.whl || exit 4
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/pip/*.whl || exit 4
      printf '%s\n' "$PWD/backend_src" "$PWD/builder" "$PWD" /tmp/site \
        > "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/trtpool-dev.pth"
      cp .whl/house/* "$HOME/wh/"
      TRTPOOL_WHEELHOUSE=$HOME/wh TRTPOOL_SYSTEM_PYTHON=1 bash scripts/setup.sh || exit 5
      python3 -c 'import numpy, torch, onnx2torch, tritonclient.grpc; print("numpy", numpy.__version__, "torch", torch.__version__)'
      ;;
    served-tests)
      python3 -m pytest -p no:cacheprovider -q -rs -m gpu tests/gpu 2>&1 | tee "$OUT/gpu_served_tests.log" | tail -n 5
      ;;
    tests)
      python3 -m pytest -p no:cacheprovider -q -rs -m gpu tests/unit/test_torch_runtime.py tests/unit/test_cuda.py \
        tests/gpu 2>&1 | tee "$OUT/gpu_tests.log" | tail -n 25
      ;;
    inprocess)
      python3 bench/inprocess.py --runtime torch --model resnet50 --onnx /tmp/resnet50.onnx --precision fp16 \
        --contexts 1,2,4,8 --batches 1,8,32 --seconds 1.5 --output "$OUT/inprocess_resnet50_fp16.json" 2>&1 | tail -n 5
      python3 bench/inprocess.py --runtime torch --model bert_base --onnx /tmp/bert_base.onnx --precision fp16 \
        --seq-len 128 --contexts 1,2,4,8 --batches 1,8,32 --seconds 1.5 --output "$OUT/inprocess_bert_base_fp16.json" 2>&1 | tail -n 5
      ;;
    serving)
      python3 bench/gpu_serving.py --runtime torch --precision fp16 --out "$OUT/gpu_serving.json" 2>&1 \
        | tee "$OUT/gpu_serving.log" | grep -v '^W' | tail -n 60
      ;;
    latency)
      python3 bench/gpu_serving.py --runtime torch --precision fp16 --sections latency --peak 2461 \
        --out "$OUT/gpu_latency.json" 2>&1 | grep -v '^[IW]1202' | tail -n 8
      ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
