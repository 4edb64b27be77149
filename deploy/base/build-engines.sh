#!/usr/bin/env bash
# The init container's job: TensorRT engines for this pod's GPU, built once per
# GPU type and TensorRT version into a shared cache, then served from there.
# Engines are specific to the GPU model and the TensorRT release that built them.
#
#   SOURCE   (/model-source)  a trtpool model repository of ONNX model folders
#                             (`trtpool-model model.onnx --repo ... --shapes ...`)
#   CACHE    (/engine-cache)  shared volume: CACHE/<gpu>/<tensorrt>/<model>/
#   SERVED   (/work/models)   becomes a link to CACHE/<gpu>/<tensorrt>: what trtpool-serve serves
#   TRTPOOL_GPU_TYPE          the GPU's name (default: nvidia-smi's, spaces as dashes)
#   TRTPOOL_BUILD_ARGS        trtpool-build flags besides --onnx/--output/--shapes (default: --precision fp16)
#
# A model folder is rebuilt only when its source files change (a sha256 stamp);
# pods that build the same model at once each build into a scratch folder and
# the first to finish wins.
set -euo pipefail
SOURCE=${SOURCE:-/model-source}
CACHE=${CACHE:-/engine-cache}
SERVED=${SERVED:-/work/models}
say() { printf '[engines] %s\n' "$*"; }

gpu=${TRTPOOL_GPU_TYPE:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)}
gpu=${gpu// /-}
[ -n "$gpu" ] || { say "no GPU found (nvidia-smi) and TRTPOOL_GPU_TYPE unset"; exit 1; }
trt=$(python3 -c 'from trtpool_builder.engine.trt_module import load_trt; m, n = load_trt(); print(f"{n}-{m.__version__}")')
target="$CACHE/$gpu/$trt"
work="$CACHE/$gpu/.scratch"   # beside the served folder (same volume: mv is a rename), never in it
mkdir -p "$target" "$work"
say "building for $gpu with $trt into $target"

profiles() {  # model folder -> its config's 'profile' parameter, one profile a line
  python3 - "$1" <<'PY'
import sys
from pathlib import Path
from trtpool_builder.folder.model_folder import read_config
text = read_config(Path(sys.argv[1])).parameters["profile"].string_value
print("\n".join(p.strip() for p in text.split(";") if p.strip()))
PY
}

for folder in "$SOURCE"/*/; do
  folder=${folder%/}
  name=$(basename "$folder")
  [ -f "$folder/config.pbtxt" ] || continue
  stamp=$(cd "$folder" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$target/$name/.source-sha256" 2>/dev/null)" = "$stamp" ]; then
    say "$name: up to date"
    continue
  fi
  scratch="$work/$name.${HOSTNAME:-host}.$$"
  rm -rf "$scratch"
  cp -r "$folder" "$scratch"
  shapes=()
  while read -r profile; do shapes+=(--shapes "$profile"); done < <(profiles "$scratch")
  for onnx in "$scratch"/*/model.onnx; do
    [ -e "$onnx" ] || continue
    # shellcheck disable=SC2086
    trtpool-build --onnx "$onnx" --output "${onnx%.onnx}.plan" "${shapes[@]}" ${TRTPOOL_BUILD_ARGS:---precision fp16}
    rm "$onnx"
  done
  echo "$stamp" >"$scratch/.source-sha256"
  old="$work/$name.old.${HOSTNAME:-host}.$$"
  [ ! -d "$target/$name" ] || mv -T "$target/$name" "$old" 2>/dev/null || true
  if mv -T "$scratch" "$target/$name" 2>/dev/null; then say "$name: built"; else rm -rf "$scratch"; say "$name: built by another pod"; fi
  rm -rf "$old"
done
ln -sfn "$target" "$SERVED"
say "serving $SERVED -> $target"
