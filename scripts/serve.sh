#!/usr/bin/env bash
# Serve the example model repository with trtpool on this machine.
#
# Sets up if needed, prepares the examples for what the machine has (TensorRT
# engines where TensorRT and a GPU exist, else the ONNX files for the embedded
# ONNX Runtime default), starts tritonserver on localhost and waits until it
# is ready. Ctrl-C stops it cleanly.
#
#   HTTP_PORT=8000 GRPC_PORT=8001 METRICS_PORT=8002 MODELS="tiny resnet50 bert_base"
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HTTP_PORT=${HTTP_PORT:-8000}
GRPC_PORT=${GRPC_PORT:-8001}
METRICS_PORT=${METRICS_PORT:-8002}
MODELS=${MODELS:-tiny resnet50 bert_base}
REPO="$ROOT/model_repository"

bash "$ROOT/scripts/setup.sh"
echo "[serve] preparing example models in $REPO: $MODELS"
# shellcheck disable=SC2086
"$ROOT/.venv/bin/trtpool-examples" --repo "$REPO" --names $MODELS

LOG=${TRTPOOL_SERVER_LOG:-$ROOT/.triton/server.log}
echo "[serve] starting tritonserver (log: $LOG)"
setsid "$ROOT/.triton/bin/tritonserver" --model-repository="$REPO" \
  --http-address=127.0.0.1 --http-port="$HTTP_PORT" \
  --grpc-address=127.0.0.1 --grpc-port="$GRPC_PORT" \
  --metrics-port="$METRICS_PORT" >"$LOG" 2>&1 &
SERVER=$!

stop() {
  trap - INT TERM EXIT
  if kill -0 "$SERVER" 2>/dev/null; then
    echo "[serve] stopping tritonserver"
    kill -INT -- "-$SERVER" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$SERVER" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$SERVER" 2>/dev/null || true
  fi
}
trap stop INT TERM EXIT

for _ in $(seq 600); do
  if ! kill -0 "$SERVER" 2>/dev/null; then
    echo "[serve] tritonserver exited during start-up; last lines of $LOG:" >&2
    tail -n 40 "$LOG" >&2
    exit 1
  fi
  if curl -sf "http://127.0.0.1:$HTTP_PORT/v2/health/ready" >/dev/null; then break; fi
  sleep 0.5
done
curl -sf "http://127.0.0.1:$HTTP_PORT/v2/health/ready" >/dev/null || { echo "[serve] not ready after 300 s; see $LOG" >&2; exit 1; }

cat <<MSG
[serve] ready. Models: $MODELS
  HTTP     http://127.0.0.1:$HTTP_PORT   (e.g. curl http://127.0.0.1:$HTTP_PORT/v2/models/tiny/config)
  gRPC     127.0.0.1:$GRPC_PORT
  metrics  http://127.0.0.1:$METRICS_PORT/metrics   (trtpool_* are trtpool's own)
Try it (in another terminal):
  $ROOT/.venv/bin/python $ROOT/scripts/client.py --url 127.0.0.1:$GRPC_PORT --protocol grpc --model tiny
  curl -s http://127.0.0.1:$HTTP_PORT/v2/models/tiny/infer -d '{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]}]}'
Ctrl-C stops the server.
MSG
wait "$SERVER"
