#!/usr/bin/env bash
# demo.sh — run the whole Sluice chain on the embedded default:
# "sluice serve -c sluice.yaml" starts the model server (examples/models),
# the feature server (the parcel-eta feature repository, embedded online
# store) and the gateway in one process, applies and materializes the
# features, and prints ready-to-paste commands. It then shows a few calls
# and keeps serving until Ctrl-C.
#
# Each start generates the synthetic feature data afresh, with the history
# ending now, so every id of the example data (users and packages 1–2000,
# routes 1–500) is within its view's ttl. On the default gateway port it
# works in examples/parcel-eta; on another, in its own folder,
# bin/demo-<gateway port>/ (a copy of examples/parcel-eta with a link to
# examples/models), so two demos on different ports share nothing.
# SLUICE_DEMO_DIR names another folder; SLUICE_BIN another sluice binary;
# SLUICE_GEN a built data generator (default: go run of it).
#
# Ports come from SLUICE_* variables (defaults in parentheses), read by
# examples/parcel-eta/sluice.yaml: SLUICE_GATEWAY_PORT (8080),
# SLUICE_GATEWAY_GRPC_PORT (8081), SLUICE_ADMIN_PORT (9901, admin API and
# console), SLUICE_HTTP_PORT (8000), SLUICE_GRPC_PORT (8001),
# SLUICE_METRICS_PORT (8002), SLUICE_FEATURE_PORT (6566). The demo's API
# key is SLUICE_DEMO_API_KEY (demo-key).
set -euo pipefail
cd "$(dirname "$0")/.."

export SLUICE_GATEWAY_PORT="${SLUICE_GATEWAY_PORT:-8080}"
export SLUICE_ADMIN_PORT="${SLUICE_ADMIN_PORT:-9901}"
key="${SLUICE_DEMO_API_KEY:-demo-key}"
gw="http://127.0.0.1:$SLUICE_GATEWAY_PORT"
admin="http://127.0.0.1:$SLUICE_ADMIN_PORT"
sluice="${SLUICE_BIN:-bin/sluice}"

# On the default ports the demo runs in examples/ itself (the docs' paths:
# examples/parcel-eta/features/data, examples/parcel-eta/recordings).
dir="${SLUICE_DEMO_DIR:-}"
if [ -z "$dir" ] && [ "$SLUICE_GATEWAY_PORT" = 8080 ]; then dir=examples; fi
dir="${dir:-bin/demo-$SLUICE_GATEWAY_PORT}"
rm -rf "$dir/parcel-eta/features/data"
if [ "$dir" != examples ]; then
  mkdir -p "$dir/parcel-eta/features"
  cp examples/parcel-eta/sluice.yaml "$dir/parcel-eta/"
  cp examples/parcel-eta/features/*.yaml "$dir/parcel-eta/features/"
  ln -sfn "$PWD/examples/models" "$dir/models"
fi
if [ -n "${SLUICE_GEN:-}" ]; then gen=("$SLUICE_GEN"); else gen=(go run ./examples/parcel-eta/features/gen); fi
"${gen[@]}" -out "$dir/parcel-eta/features/data" -users 2000 -packages 2000 -routes 500 >/dev/null

"$sluice" serve -c "$dir/parcel-eta/sluice.yaml" --log-format text &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT INT TERM

ready=
for _ in $(seq 1 1800); do
  if curl -sf "$gw/ready" >/dev/null 2>&1; then ready=1; break; fi
  if ! kill -0 "$pid" 2>/dev/null; then echo "demo: sluice exited during start-up" >&2; exit 1; fi
  sleep 0.1
done
[ -n "$ready" ] || { echo "demo: the gateway at $gw is not ready after 180 s" >&2; exit 1; }

body='{"user_id": 7, "package_id": 62, "route_id": 29, "base_eta": 35, "route_delay_factor": 0.4}'
# show prints a command the way a shell takes it back (each argument
# quoted where needed), then runs it.
show() {
  echo
  printf '$'
  for a in "$@"; do
    if [[ "$a" =~ ^[A-Za-z0-9_./:=@-]+$ ]]; then printf ' %s' "$a"; else printf " '%s'" "${a//\'/\'\\\'\'}"; fi
  done
  echo
  "$@" || true
  echo
}
show curl -s "$gw/v1/services/parcel-eta:predict" -H "Authorization: Bearer $key" -d "$body"
show curl -s "$gw/v1/services/parcel-eta:predict" -H "Authorization: Bearer $key" -H 'x-canary: true' -d "$body"
show curl -s "$gw/v1/services/parcel-eta:predict" -H 'Authorization: Bearer wrong' -d "$body"
show curl -s "$admin/endpoints"
echo "Console: $admin/console/   Data and recordings: $dir/parcel-eta/"
echo "Press Ctrl-C to stop."
wait "$pid"
