#!/usr/bin/env bash
# demo.sh — start Sluice on the example repository, show a few calls, then keep
# serving until Ctrl-C. Ports: HTTP 8000, gRPC 8001, metrics 8002 (override
# with SLUICE_HTTP_PORT, SLUICE_GRPC_PORT, SLUICE_METRICS_PORT).
set -euo pipefail
cd "$(dirname "$0")/.."

http_port="${SLUICE_HTTP_PORT:-8000}"
grpc_port="${SLUICE_GRPC_PORT:-8001}"
metrics_port="${SLUICE_METRICS_PORT:-8002}"
base="http://127.0.0.1:$http_port"

bin/sluice serve --model-repository examples/models --address 127.0.0.1 \
  --http-port "$http_port" --grpc-port "$grpc_port" --metrics-port "$metrics_port" \
  --log-format text &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT INT TERM

for _ in $(seq 1 100); do
  if curl -sf "$base/v2/health/ready" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$pid" 2>/dev/null; then echo "demo: sluice exited during start-up" >&2; exit 1; fi
  sleep 0.1
done

show() { echo; echo "\$ $*"; "$@"; echo; }
show curl -s "$base/v2"
show curl -s -X POST "$base/v2/repository/index"
show curl -s "$base/v2/models/simple/infer" -d @examples/requests/simple.json
show curl -s "$base/v2/models/parcel_eta/infer" -d @examples/requests/parcel_eta.json
show bin/sluice repo check examples/models
echo "Sluice is serving examples/models on $base (gRPC :$grpc_port, metrics http://127.0.0.1:$metrics_port/metrics)."
echo "Press Ctrl-C to stop."
wait "$pid"
