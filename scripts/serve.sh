#!/usr/bin/env bash
# Serve with tritonserver and the trtpool backend (trtpool-serve), after the set-up.
#
#   scripts/serve.sh                      the examples: generated into model_repository/, then served
#   scripts/serve.sh --repo DIR [FLAGS]   your own repository; FLAGS go to trtpool-serve, and those it
#                                         does not know to tritonserver (see .venv/bin/trtpool-serve --help)
#
# Examples only: MODELS="tiny resnet50 bert_base" picks the examples (only those load).
# Both forms: HTTP_PORT=8000 GRPC_PORT=8001 METRICS_PORT=8002 move the ports (a --http-port etc. flag wins).
# tritonserver's log goes to .triton/server.log (TRTPOOL_SERVER_LOG=FILE moves it).
# Ctrl-C stops the server and its backend processes.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/setup.sh"
export TRTPOOL_TRITONSERVER="$ROOT/.triton/bin/tritonserver"
LOG=${TRTPOOL_SERVER_LOG:-$ROOT/.triton/server.log}

PORTS=(--http-port "${HTTP_PORT:-8000}" --grpc-port "${GRPC_PORT:-8001}" --metrics-port "${METRICS_PORT:-8002}")
for arg in "$@"; do
  case "$arg" in
    --repo|--repo=*) exec "$ROOT/.venv/bin/trtpool-serve" "${PORTS[@]}" --log "$LOG" "$@" ;;
  esac
done

MODELS=${MODELS:-tiny resnet50 bert_base}
REPO="$ROOT/model_repository"
echo "[serve] preparing example models in $REPO: $MODELS"
# shellcheck disable=SC2086
"$ROOT/.venv/bin/trtpool-examples" --repo "$REPO" --names $MODELS
echo "[serve] tritonserver log: $LOG"
FIRST=${MODELS%% *}
SAMPLE=$(compgen -G "$REPO/$FIRST/sample.*" | head -n 1 || true)   # a pipeline example's request (its bytes)
echo "[serve] once ready, try: $ROOT/.venv/bin/python $ROOT/scripts/client.py --protocol grpc --url 127.0.0.1:${GRPC_PORT:-8001} --model $FIRST${SAMPLE:+ --file $SAMPLE}"
# shellcheck disable=SC2086
exec "$ROOT/.venv/bin/trtpool-serve" --repo "$REPO" --models $MODELS "${PORTS[@]}" --log "$LOG" "$@"
