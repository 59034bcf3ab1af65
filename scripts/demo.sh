#!/usr/bin/env bash
# demo.sh — run the whole Sluice chain on the embedded default:
# "sluice serve -c examples/parcel-eta/sluice.yaml" starts the model server
# (examples/models), the feature server (examples/parcel-eta/features, embedded
# online store) and the gateway in one process, applies and materializes the
# features, and prints a ready-to-paste curl. This script generates the
# synthetic feature data when it is missing or older than an hour (so its
# timestamps are within the views' ttl), shows a few calls, then keeps
# serving until Ctrl-C.
# Ports: gateway 8080 (gRPC 8081, admin 9901), models 8000/8001/8002,
# features 6566 — set in examples/parcel-eta/sluice.yaml.
set -euo pipefail
cd "$(dirname "$0")/.."

cfg=examples/parcel-eta/sluice.yaml
frepo=examples/parcel-eta/features
gw=http://127.0.0.1:8080

if [ -z "$(find "$frepo/data/user_stats.parquet" -mmin -60 2>/dev/null)" ]; then
  rm -f "$frepo/data/online.db"
  go run ./examples/parcel-eta/features/gen -out "$frepo/data" -users 2000 -packages 2000 -routes 500
fi

bin/sluice serve -c "$cfg" --log-format text &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT INT TERM

for _ in $(seq 1 300); do
  if curl -sf "$gw/ready" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$pid" 2>/dev/null; then echo "demo: sluice exited during start-up" >&2; exit 1; fi
  sleep 0.1
done

body='{"user_id": 7, "package_id": 62, "route_id": 29, "base_eta": 35, "route_delay_factor": 0.4}'
show() { echo; echo "\$ $*"; "$@"; echo; }
show curl -s "$gw/v1/services/parcel-eta:predict" -H "Authorization: Bearer ${SLUICE_DEMO_API_KEY:-demo-key}" -d "$body"
show curl -s "$gw/v1/services/parcel-eta:predict" -H "Authorization: Bearer ${SLUICE_DEMO_API_KEY:-demo-key}" -H 'x-canary: true' -d "$body"
show curl -s "$gw/v1/services/parcel-eta:predict" -H 'Authorization: Bearer wrong' -d "$body"
show curl -s http://127.0.0.1:9901/endpoints
echo "Press Ctrl-C to stop."
wait "$pid"
