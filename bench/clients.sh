#!/usr/bin/env bash
# clients.sh — the model server as real clients see it, side by side with
# its peers: parcel_eta's KServe v2 JSON infer driven by clients that behave
# as teams' clients do, every row's server CPU per request taken from /proc
# (the server's whole process tree: Sluice and its Python workers, gunicorn's
# master and workers). Writes bench/results/clients.md (also printed).
#
# Rows, alternated within each round and repeated ROUNDS times:
#   hey (Go's default transport) at c=32: no Accept-Encoding, then
#     Accept-Encoding: gzip (hey's default, as every Go client, OkHttp and
#     browsers send it) against Sluice; the Flask peer; the TorchScript
#     model through the Python worker (batching as shipped);
#   hey at a fixed 1,000 requests/s (20 workers x 50/s): Sluice, the Flask
#     peer and a trivial Go net/http server (bench/cmd/trivialserver);
#   `sluice perf` at c=32 (sends no Accept-Encoding);
#   tritonclient's HTTP client (infer() one at a time) and gRPC client
#     (async_infer, c=32), plain and with their
#     gzip options (request and response compression over HTTP,
#     compression_algorithm over gRPC), when TRITONCLIENT_PYTHONPATH names a
#     folder holding Triton's Python client (test/triton-qa builds one from
#     Triton's client sources).
#
#   bench/clients.sh
#   CLIENTS_REQUESTS [20000] requests per c=32 hey row (Flask: a quarter)
#   CLIENTS_RATE_SECONDS [10] seconds per fixed-rate row
#   CLIENTS_ROUNDS [2]
#   CLIENTS_TRITON_REQUESTS [4000] requests per tritonclient row
#   CLIENTS_OUT [bench/results/clients.md]
#   CLIENTS_PROFILE_DIR [unset] record 5 s of Sluice with `perf record -g`
#     during the first round's gzip row and its fixed-rate row there
#   HEY [hey on PATH, else installed from the Go module proxy]
#   SLUICE_BIN [bin/sluice], BENCH_PEERS_DIR [bench/peers], BENCH_NO_PEER=1
set -euo pipefail
ROOT="$(git -C "$(dirname "$0")" rev-parse --show-toplevel 2>/dev/null || (cd "$(dirname "$0")/.." && pwd))"
cd "$ROOT"
PY=/usr/bin/python3
BENCH_NAME=clients
# shellcheck source=bench/lib.sh
. bench/lib.sh

N="${CLIENTS_REQUESTS:-20000}"
RATE_SECS="${CLIENTS_RATE_SECONDS:-10}"
ROUNDS="${CLIENTS_ROUNDS:-2}"
TN="${CLIENTS_TRITON_REQUESTS:-4000}"
OUT="${CLIENTS_OUT:-bench/results/clients.md}"
BIN="${SLUICE_BIN:-bin/sluice}"
PEERS="${BENCH_PEERS_DIR:-$ROOT/bench/peers}"
PROFILES="${CLIENTS_PROFILE_DIR:-}"
BODY=examples/requests/parcel_eta.json
CORES="$(nproc)"
TCK="$(getconf CLK_TCK)"
[ -x "$BIN" ] || { say "$BIN not found; run 'make build'"; exit 1; }
if [ -n "${HEY:-}" ]; then :; elif command -v hey >/dev/null; then HEY=hey; else
  say "installing hey from the Go module proxy"
  GOBIN="$WORK/bin" go install github.com/rakyll/hey@v0.1.5 && HEY="$WORK/bin/hey"
fi
go build -o "$WORK/trivialserver" ./bench/cmd/trivialserver
[ -z "$PROFILES" ] || mkdir -p "$PROFILES"

REPO="$WORK/models"
mkdir -p "$REPO"
cp -r examples/models/parcel_eta examples/models/parcel_eta_ts "$REPO/"
# This report's TorchScript row is the Python worker's (bench/torch.sh
# compares it with the in-process engine).
printf 'parameters { key: "SLUICE_PYTORCH_ENGINE" value: { string_value: "python" } }\n' >>"$REPO/parcel_eta_ts/config.pbtxt"
HTTP_PORT="$(free_port)"; GRPC_PORT="$(free_port)"; METRICS_PORT="$(free_port)"
"$BIN" serve --model-repository "$REPO" --address 127.0.0.1 --http-port "$HTTP_PORT" \
  --grpc-port "$GRPC_PORT" --metrics-port "$METRICS_PORT" --log-level warn >"$WORK/sluice.log" 2>&1 &
SLUICE_PID=$!; PIDS+=("$SLUICE_PID")
wait_ready sluice "http://127.0.0.1:$HTTP_PORT/v2/models/parcel_eta_ts/ready" "$SLUICE_PID" "$WORK/sluice.log" 120

TRIVIAL_PORT="$(free_port)"
"$WORK/trivialserver" -listen "127.0.0.1:$TRIVIAL_PORT" >"$WORK/trivial.log" 2>&1 &
TRIVIAL_PID=$!; PIDS+=("$TRIVIAL_PID")
wait_ready "trivial server" "http://127.0.0.1:$TRIVIAL_PORT/v2/health/ready" "$TRIVIAL_PID" "$WORK/trivial.log"

PEER_PID=""
if [ "${BENCH_NO_PEER:-}" != 1 ] && "$PY" -c 'import flask, gunicorn, torch' 2>/dev/null; then
  PEER_PORT="$(free_port)"
  PEER_MODEL="$ROOT/examples/torchscript/parcel_eta.pt" PEER_NAME=parcel_eta \
  PEER_INPUTS=user_features,package_features,route_features \
  PEER_OUTPUTS=eta_prediction,confidence_score PEER_TORCH_THREADS=1 \
    "$PY" -m gunicorn -w "$CORES" --threads 1 -b "127.0.0.1:$PEER_PORT" \
    --chdir "$PEERS" 'flask_kserve_peer:app' >"$WORK/peer.log" 2>&1 &
  PEER_PID=$!; PIDS+=("$PEER_PID")
  wait_ready "flask peer" "http://127.0.0.1:$PEER_PORT/v2/health/ready" "$PEER_PID" "$WORK/peer.log" 90
else
  say "the Flask peer is left out (BENCH_NO_PEER=1, or python3-flask, gunicorn or python3-torch missing)"
fi

TRITON=""
if [ -n "${TRITONCLIENT_PYTHONPATH:-}" ] && PYTHONPATH="$TRITONCLIENT_PYTHONPATH" "$PY" -c 'import tritonclient.http, tritonclient.grpc' 2>/dev/null; then
  TRITON=1
else
  say "tritonclient rows left out (set TRITONCLIENT_PYTHONPATH to a folder holding Triton's Python client)"
fi

sluice_url="http://127.0.0.1:$HTTP_PORT/v2/models/parcel_eta/infer"
ts_url="http://127.0.0.1:$HTTP_PORT/v2/models/parcel_eta_ts/infer"
trivial_url="http://127.0.0.1:$TRIVIAL_PORT/v2/models/parcel_eta/infer"
peer_url="http://127.0.0.1:${PEER_PORT:-0}/v2/models/parcel_eta/infer"

# Warm every server up (and the Python worker's torch) before measuring.
"$HEY" -n 2000 -c 32 -m POST -T application/json -D "$BODY" "$sluice_url" >/dev/null
"$HEY" -n 2000 -c 32 -m POST -T application/json -D "$BODY" "$ts_url" >/dev/null
"$HEY" -n 2000 -c 32 -m POST -T application/json -D "$BODY" "$trivial_url" >/dev/null
[ -z "$PEER_PID" ] || "$HEY" -n 500 -c 8 -m POST -T application/json -D "$BODY" "$peer_url" >/dev/null

ROWS="$WORK/rows.tsv"
: >"$ROWS"
# record SYSTEM ROW CLIENT PID OUTPUT-FILE: appends one row from hey's or
# the Python driver's summary and the CPU ticks spent meanwhile.
record() {
  local system="$1" row="$2" client="$3" ticks="$4" out="$5" rps ok p50 p99 cpu
  rps="$(awk '/Requests\/sec/ {printf "%.0f", $2}' "$out")"
  ok="$(awk '/\[200\]/ {s += $2} END {print s + 0}' "$out")"
  p50="$(awk '/ 50%+ in / {printf "%.2f", $3 * 1000}' "$out")"
  p99="$(awk '/ 99%+ in / {printf "%.2f", $3 * 1000}' "$out")"
  cpu="$(awk -v d="$ticks" -v n="$ok" -v t="$TCK" 'BEGIN { if (n > 0) printf "%.0f", d / t * 1e6 / n; else print "n/a" }')"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$row" "$system" "$client" "$rps" "$ok" "${p50:-}" "${p99:-}" "$cpu" >>"$ROWS"
  say "$row | $system | $client: $rps/s, $ok ok, server CPU $cpu µs/request"
}

PROF_PID=""
profile() { # NAME: 5 s of `perf record -g` on Sluice, in the background
  PROF_PID=""
  [ -n "$PROFILES" ] && [ "$round" = 1 ] || return 0
  perf record -q -F 999 -g -p "$SLUICE_PID" -o "$PROFILES/$1.perf.data" -- sleep 5 >/dev/null 2>&1 &
  PROF_PID=$!
}
profile_wait() { [ -z "$PROF_PID" ] || wait "$PROF_PID" || true; }

# hey_row SYSTEM ROW PID URL N C [hey flags...]
hey_row() {
  local system="$1" row="$2" pid="$3" url="$4" n="$5" c="$6" before after
  shift 6
  before="$(tree_ticks "$pid")"
  "$HEY" -n "$n" -c "$c" -m POST -T application/json -D "$BODY" "$@" "$url" >"$WORK/out.txt"
  after="$(tree_ticks "$pid")"
  record "$system" "$row" "hey -n $n -c $c $*" $((after - before)) "$WORK/out.txt"
}

# rate_row SYSTEM PID URL: hey at a fixed 1,000/s for RATE_SECS seconds.
rate_row() {
  local system="$1" pid="$2" url="$3" before after
  before="$(tree_ticks "$pid")"
  "$HEY" -z "${RATE_SECS}s" -c 20 -q 50 -m POST -T application/json -D "$BODY" -disable-compression "$url" >"$WORK/out.txt"
  after="$(tree_ticks "$pid")"
  record "$system" "fixed 1,000/s" "hey -z ${RATE_SECS}s -c 20 -q 50 -disable-compression" $((after - before)) "$WORK/out.txt"
}

# triton_row PROTOCOL COMPRESSION
triton_row() {
  local before after c=32
  [ "$1" = http ] && c=1 # tritonclient.http: infer() one at a time (bench/clients_triton.py)
  before="$(tree_ticks "$SLUICE_PID")"
  PYTHONPATH="$TRITONCLIENT_PYTHONPATH" "$PY" bench/clients_triton.py --protocol "$1" --compression "$2" \
    --url "127.0.0.1:$([ "$1" = http ] && echo "$HTTP_PORT" || echo "$GRPC_PORT")" \
    --requests "$TN" --concurrency "$c" --body "$BODY" --model parcel_eta >"$WORK/out.txt"
  after="$(tree_ticks "$SLUICE_PID")"
  record Sluice "c=$c, tritonclient" "tritonclient.$1, compression $2" $((after - before)) "$WORK/out.txt"
}

load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
started="$(date -u '+%Y-%m-%d %H:%M UTC')"
t0=$SECONDS
for round in $(seq "$ROUNDS"); do
  say "round $round of $ROUNDS"
  hey_row Sluice "c=32, no Accept-Encoding" "$SLUICE_PID" "$sluice_url" "$N" 32 -disable-compression
  profile gzip-c32
  hey_row Sluice "c=32, Accept-Encoding: gzip" "$SLUICE_PID" "$sluice_url" "$N" 32
  profile_wait
  [ -z "$PEER_PID" ] || hey_row "Flask peer" "c=32, no Accept-Encoding" "$PEER_PID" "$peer_url" $((N / 4)) 32 -disable-compression
  [ -z "$PEER_PID" ] || hey_row "Flask peer" "c=32, Accept-Encoding: gzip" "$PEER_PID" "$peer_url" $((N / 4)) 32
  hey_row "Sluice, TorchScript via Python worker" "c=32, no Accept-Encoding" "$SLUICE_PID" "$ts_url" $((N / 2)) 32 -disable-compression
  profile rate-1000
  rate_row Sluice "$SLUICE_PID" "$sluice_url"
  profile_wait
  rate_row "trivial Go server" "$TRIVIAL_PID" "$trivial_url"
  [ -z "$PEER_PID" ] || rate_row "Flask peer" "$PEER_PID" "$peer_url"
  "$BIN" perf -u "127.0.0.1:$HTTP_PORT" -i http -m parcel_eta --input-data "$BODY" \
    --concurrency-range 32 -p 2000 -r 3 --server-pid "$SLUICE_PID" >"$WORK/perf.txt" 2>/dev/null || true
  # Its summary row: concurrency, infer/s, p50, p90, p95, p99 (µs), ..., server CPU µs/inf (11th).
  awk -v n="$N" '$1 == "32" { printf "c=32, sluice perf\tSluice\tsluice perf --concurrency-range 32 -p 2000 -r 3 --server-pid\t%.0f\t(3 windows)\t%.2f\t%.2f\t%.0f\n", $2, $3 / 1000, $6 / 1000, $11 }' \
    "$WORK/perf.txt" >>"$ROWS"
  if [ -n "$TRITON" ]; then
    for proto in http grpc; do
      triton_row "$proto" none
      triton_row "$proto" gzip
    done
  fi
done
elapsed=$((SECONDS - t0))
load_end="$(cut -d' ' -f1-3 /proc/loadavg)"

commit="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD 2>/dev/null || commit="$commit plus uncommitted changes"
{
  echo "# Model server as real clients see it"
  echo
  echo "Generated by \`bench/clients.sh\` on $started (${elapsed} s of measuring)."
  echo
  echo "- **Command:** \`bench/clients.sh  # CLIENTS_REQUESTS=$N CLIENTS_RATE_SECONDS=$RATE_SECS CLIENTS_ROUNDS=$ROUNDS CLIENTS_TRITON_REQUESTS=$TN\`"
  echo "- **Machine:** $CORES CPUs ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $(uname -sr), $(go version | awk '{print $3}'), commit $commit. Load generators and servers share these CPUs."
  echo "- **Load average** (1, 5, 15 min): $load_start at the start, $load_end at the end."
  echo "- **Body:** \`$BODY\` (parcel_eta, KServe v2 JSON, $(wc -c <"$BODY") bytes) on every row; every server row reports CPU per successful request: user + system ticks of the server's whole process tree from \`/proc\` over the row, divided by its 200 answers."
  echo "- **Servers:** \`sluice serve\` with parcel_eta (ONNX, as shipped) and parcel_eta_ts (TorchScript through the Python worker, as shipped); the Flask peer (\`bench/peers\`: gunicorn, $CORES sync workers, one torch thread each, the TorchScript model); \`bench/cmd/trivialserver\` (reads the body, answers a fixed one)."
  echo
  echo "| row | system | client | requests/s | 200s | p50 ms | p99 ms | server CPU µs/request |"
  echo "|---|---|---|---:|---:|---:|---:|---:|"
  sort -s -t$'\t' -k1,1 -k2,2 "$ROWS" | awk -F'\t' '{printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8}'
} >"$OUT"
cat "$OUT"
