#!/usr/bin/env bash
# demo.sh — start Sluice on the examples: the model server on examples/models
# and the feature server on examples/parcel-eta/features (synthetic data,
# generated on first run), show a few calls, then keep serving until Ctrl-C.
# Ports: HTTP 8000, gRPC 8001, metrics 8002, features 6566 (override with
# SLUICE_HTTP_PORT, SLUICE_GRPC_PORT, SLUICE_METRICS_PORT, SLUICE_FEATURE_PORT).
set -euo pipefail
cd "$(dirname "$0")/.."

http_port="${SLUICE_HTTP_PORT:-8000}"
grpc_port="${SLUICE_GRPC_PORT:-8001}"
metrics_port="${SLUICE_METRICS_PORT:-8002}"
feature_port="${SLUICE_FEATURE_PORT:-6566}"
base="http://127.0.0.1:$http_port"
fbase="http://127.0.0.1:$feature_port"
frepo=examples/parcel-eta/features

# Feature data: small synthetic Parquet files, the registry and the embedded
# online store (all under $frepo/data, which git ignores).
if [ ! -f "$frepo/data/user_stats.parquet" ]; then
  go run ./examples/parcel-eta/features/gen -out "$frepo/data" -users 2000 -packages 2000 -routes 500
fi
bin/sluice features apply --repo "$frepo"
bin/sluice features materialize now-2400h now --repo "$frepo" --no-progress

bin/sluice serve --model-repository examples/models --address 127.0.0.1 \
  --http-port "$http_port" --grpc-port "$grpc_port" --metrics-port "$metrics_port" \
  --log-format text &
pid=$!
bin/sluice feature-server --repo "$frepo" --address 127.0.0.1 --port "$feature_port" --log-format text &
fpid=$!
trap 'kill "$pid" "$fpid" 2>/dev/null || true; wait "$pid" "$fpid" 2>/dev/null || true' EXIT INT TERM

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
for _ in $(seq 1 100); do
  if curl -sf "$fbase/health" >/dev/null 2>&1; then break; fi
  sleep 0.1
done
show curl -s "$fbase/get-online-features" \
  -d '{"features": ["user_stats:u_f00", "route_features:distance_km"], "entities": {"user_id": [1, 2], "route_id": [1, 2]}}'
echo "Sluice is serving examples/models on $base (gRPC :$grpc_port, metrics http://127.0.0.1:$metrics_port/metrics)"
echo "and the parcel_eta features on $fbase (values older than their view's ttl come back OUTSIDE_MAX_AGE)."
echo "Press Ctrl-C to stop."
wait "$pid"
