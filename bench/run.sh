#!/usr/bin/env bash
# run.sh — measure Sluice and its peers side by side on parcel_eta and write
# bench/results/serving.md (also printed to stdout).
#
# Starts, on free 127.0.0.1 ports: bin/sluice serving a temporary repository
# that holds parcel_eta twice (as `parcel_eta`, dynamic batching off, and as
# `parcel_eta_batched`, dynamic batching on), and the Flask + gunicorn +
# PyTorch peer from bench/peers. The harness (bench/cmd/modelbench)
# measures raw ONNX Runtime in-process, then drives every server row with
# `bin/sluice perf`, and writes the report. Every process this script starts
# is stopped by pid, whatever happens. `make bench` builds bin/sluice first.
#
# Environment (defaults in brackets):
#   BENCH_WINDOW_MS [2000]            sluice perf measurement window
#   BENCH_MAX_TRIALS [5]              sluice perf windows per level at most (>= 3)
#   BENCH_CONCURRENCY [1,8,32,64]     concurrency levels of every server row
#   BENCH_TRANSPORTS [grpc,http-json,http-binary]
#   BENCH_ORT_BATCHES [1,8,32,64]     raw ONNX Runtime batch sizes
#   BENCH_ORT_SECONDS [2]             seconds per raw ONNX Runtime row
#   BENCH_BATCH_DELAY_US [500]         max_queue_delay_microseconds of parcel_eta_batched
#   BENCH_RATES [1000]                fixed request rates (open loop) of the CPU-per-request rows; '' for none
#   BENCH_RANKER [1]                  0 leaves the compute-bound model (route_ranker) out
#   BENCH_RANKER_CONCURRENCY [1,8,32] concurrency levels of the route_ranker rows
#   BENCH_STARTUP_RUNS [5]            Sluice start-up measurements
#   BENCH_OUT [bench/results/serving.md]
#   BENCH_PEERS_DIR [<repo>/bench/peers]
#   BENCH_NO_PEER [unset]             set to 1 to leave the Flask peer out
#   SLUICE_BIN [bin/sluice]
#   BENCH_FEATURES [1]                 0 leaves the feature store benchmark out
#   BENCH_FEATURE_SECONDS [3]          measured seconds per feature-read row at most
#   BENCH_FEATURES_OUT [bench/results/features.md]
#   SLUICE_REDIS_ADDR [127.0.0.1:6379] Redis for the feature store rows
#   BENCH_GATEWAY [1]                  0 leaves the gateway benchmark out
#   BENCH_GATEWAY_SECONDS [10]         measured seconds per proxy-hop target and rate
#   BENCH_GATEWAY_CHAIN_SECONDS [6]    measured seconds per full-chain rate
#   BENCH_GATEWAY_OUT [bench/results/gateway.md]
# Quick run: BENCH_WINDOW_MS=500 BENCH_MAX_TRIALS=3 BENCH_CONCURRENCY=1,32 BENCH_ORT_SECONDS=1 BENCH_STARTUP_RUNS=1 bench/run.sh
set -euo pipefail

ROOT="$(git -C "$(dirname "$0")" rev-parse --show-toplevel 2>/dev/null || (cd "$(dirname "$0")/.." && pwd))"
cd "$ROOT"

WINDOW_MS="${BENCH_WINDOW_MS:-2000}"
TRIALS="${BENCH_MAX_TRIALS:-5}"
LEVELS="${BENCH_CONCURRENCY:-1,8,32,64}"
TRANSPORTS="${BENCH_TRANSPORTS:-grpc,http-json,http-binary}"
ORT_BATCHES="${BENCH_ORT_BATCHES:-1,8,32,64}"
ORT_SECS="${BENCH_ORT_SECONDS:-2}"
DELAY_US="${BENCH_BATCH_DELAY_US:-500}"
RATES="${BENCH_RATES-1000}"
RANKER="${BENCH_RANKER:-1}"
RANKER_LEVELS="${BENCH_RANKER_CONCURRENCY:-1,8,32}"
STARTUP_RUNS="${BENCH_STARTUP_RUNS:-5}"
OUT="${BENCH_OUT:-bench/results/serving.md}"
PEERS="${BENCH_PEERS_DIR:-$ROOT/bench/peers}"
BIN="${SLUICE_BIN:-bin/sluice}"
PY=/usr/bin/python3 # Debian's python3-torch and python3-flask live here
CORES="$(nproc)"

BENCH_NAME=bench
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

[ -x "$BIN" ] || { say "$BIN not found; run 'make build' (or 'make bench')"; exit 1; }

# The peer's dependencies: Debian packages, installed only when running as root.
peer_ok=1
if [ -n "${BENCH_NO_PEER:-}" ]; then
  peer_ok=0
elif [ ! -f "$PEERS/flask_kserve_peer.py" ]; then
  say "no peer at $PEERS/flask_kserve_peer.py; the Flask rows are left out"
  peer_ok=0
else
  missing=()
  "$PY" -c 'import flask' 2>/dev/null || missing+=(python3-flask)
  "$PY" -c 'import gunicorn' 2>/dev/null || missing+=(gunicorn)
  "$PY" -c 'import torch' 2>/dev/null || missing+=(python3-torch)
  if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      say "installing Debian packages: ${missing[*]}"
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
    else
      say "missing ${missing[*]} (not root, so not installing); the Flask rows are left out"
      peer_ok=0
    fi
  fi
fi

# The in-process row loads ONNX Runtime the same way Sluice does.
if [ -z "${SLUICE_ONNXRUNTIME_LIB:-}" ] && [ -x scripts/install-onnxruntime.sh ]; then
  lib="$(scripts/install-onnxruntime.sh --print-path 2>/dev/null || true)"
  [ -n "$lib" ] && [ -f "$lib" ] && export SLUICE_ONNXRUNTIME_LIB="$lib"
fi

say "building the harness"
go build -o "$WORK/modelbench" ./bench/cmd/modelbench
go build -o "$WORK/trivialserver" ./bench/cmd/trivialserver

# variant SRC NAME [DELAY_US]: copy examples/models/SRC as NAME; with a
# delay, set its dynamic batching's max_queue_delay_microseconds; without
# one, remove its dynamic_batching block (batching off).
variant() {
  cp -r "examples/models/$1" "$REPO/$2"
  "$PY" - "$REPO/$2/config.pbtxt" "$1" "$2" "${3:-}" <<'PYEOF'
import re, sys
path, src, name, delay = sys.argv[1:5]
cfg = open(path).read().replace(f'name: "{src}"', f'name: "{name}"', 1)
block = re.compile(r"dynamic_batching\s*\{[^{}]*\}\n?")
if not block.search(cfg):
    sys.exit(f"{path}: no dynamic_batching block to change")
if delay:
    cfg = re.sub(r"max_queue_delay_microseconds:\s*\d+", f"max_queue_delay_microseconds: {delay}", cfg, count=1)
else:
    cfg = block.sub("", cfg, count=1)
open(path, "w").write(cfg)
PYEOF
}

# One repository: parcel_eta as shipped (its own dynamic_batching block),
# without dynamic batching, and with a batching delay; route_ranker (the
# compute-bound model) as shipped and without.
REPO="$WORK/models"
mkdir -p "$REPO"
cp -r examples/models/parcel_eta "$REPO/parcel_eta"
variant parcel_eta parcel_eta_nobatch
variant parcel_eta parcel_eta_batched "$DELAY_US"
BATCHING="parcel_eta's dynamic_batching block with max_queue_delay_microseconds: $DELAY_US"
ranker_args=()
if [ "$RANKER" != 0 ]; then
  cp -r examples/models/route_ranker "$REPO/route_ranker"
  variant route_ranker route_ranker_nobatch
  ranker_args=(-ranker-model route_ranker -ranker-unbatched route_ranker_nobatch -ranker-levels "$RANKER_LEVELS")
fi

HTTP_PORT="$(free_port)"; GRPC_PORT="$(free_port)"; METRICS_PORT="$(free_port)"
"$BIN" serve --model-repository "$REPO" --address 127.0.0.1 \
  --http-port "$HTTP_PORT" --grpc-port "$GRPC_PORT" --metrics-port "$METRICS_PORT" \
  --log-level warn >"$WORK/sluice.log" 2>&1 &
SLUICE_PID=$!
PIDS+=("$SLUICE_PID")
wait_ready sluice "http://127.0.0.1:$HTTP_PORT/v2/health/ready" "$SLUICE_PID" "$WORK/sluice.log"

# The floor for a Go HTTP server at a fixed rate (idle wake-ups).
trivial_args=()
if [ -n "$RATES" ]; then
  TRIVIAL_PORT="$(free_port)"
  "$WORK/trivialserver" -listen "127.0.0.1:$TRIVIAL_PORT" >"$WORK/trivial.log" 2>&1 &
  TRIVIAL_PID=$!
  PIDS+=("$TRIVIAL_PID")
  if wait_ready "trivial server" "http://127.0.0.1:$TRIVIAL_PORT/v2/health/ready" "$TRIVIAL_PID" "$WORK/trivial.log"; then
    trivial_args=(-trivial-http "127.0.0.1:$TRIVIAL_PORT" -trivial-pid "$TRIVIAL_PID")
  fi
fi

peer_args=()
if [ "$peer_ok" = 1 ]; then
  PEER_PORT="$(free_port)"
  PEER_MODEL="$ROOT/examples/torchscript/parcel_eta.pt" \
  PEER_NAME=parcel_eta \
  PEER_INPUTS=user_features,package_features,route_features \
  PEER_OUTPUTS=eta_prediction,confidence_score \
  PEER_TORCH_THREADS=1 \
    "$PY" -m gunicorn -w "$CORES" --threads 1 -b "127.0.0.1:$PEER_PORT" \
    --chdir "$PEERS" 'flask_kserve_peer:app' >"$WORK/peer.log" 2>&1 &
  PEER_PID=$!
  PIDS+=("$PEER_PID")
  if wait_ready "flask peer" "http://127.0.0.1:$PEER_PORT/v2/health/ready" "$PEER_PID" "$WORK/peer.log"; then
    # gunicorn's master is the root of the peer's process tree: its
    # workers' CPU is counted with it.
    peer_args=(-peer-http "127.0.0.1:$PEER_PORT" -peer-pid "$PEER_PID" -peer-model parcel_eta
      -peer-desc "Flask + gunicorn ($CORES sync workers, 1 torch thread each) + PyTorch")
  fi
fi

if [ -n "${MAKELEVEL:-}" ]; then invoked="make bench"; else invoked="bench/run.sh"; fi
cmdline="$invoked  # BENCH_WINDOW_MS=$WINDOW_MS BENCH_MAX_TRIALS=$TRIALS BENCH_CONCURRENCY=$LEVELS BENCH_ORT_BATCHES=$ORT_BATCHES BENCH_ORT_SECONDS=$ORT_SECS BENCH_BATCH_DELAY_US=$DELAY_US BENCH_STARTUP_RUNS=$STARTUP_RUNS BENCH_RATES=$RATES BENCH_RANKER=$RANKER"

rows=$(( $(tr ',' '\n' <<<"$TRANSPORTS" | grep -c .) * 2 + 2 + ${#peer_args[@]} / 8 + ${#ranker_args[@]} / 3 ))
levels=$(tr ',' '\n' <<<"$LEVELS" | grep -c .)
say "running the harness: $rows server rows x $levels levels, 3-$TRIALS windows of ${WINDOW_MS} ms each (at most about $(( rows * levels * TRIALS * WINDOW_MS / 1000 + 30 )) s)"
timeout --signal=TERM --kill-after=10 900 "$WORK/modelbench" \
  -window "${WINDOW_MS}ms" -max-trials "$TRIALS" -concurrency "$LEVELS" -transports "$TRANSPORTS" \
  -ort-batches "$ORT_BATCHES" -ort-time "${ORT_SECS}s" \
  -startup-runs "$STARTUP_RUNS" -sluice-bin "$BIN" -model-repository examples/models \
  -sluice-http "127.0.0.1:$HTTP_PORT" -sluice-grpc "127.0.0.1:$GRPC_PORT" -sluice-pid "$SLUICE_PID" \
  -model parcel_eta_nobatch -batched-model parcel_eta_batched -shipped-model parcel_eta -batching-desc "$BATCHING" \
  -rates "$RATES" "${trivial_args[@]}" "${ranker_args[@]}" \
  "${peer_args[@]}" -command "$cmdline" -out "$OUT"

# Feature store: online reads (embedded vs Redis vs a raw go-redis
# pipeline; store, in-process serving and HTTP) and materialization
# throughput, written to bench/results/features.md.
if [ "${BENCH_FEATURES:-1}" != 0 ]; then
  say "feature store benchmark"
  go build -o "$WORK/featurebench" ./bench/cmd/featurebench
  timeout --signal=TERM --kill-after=10 900 "$WORK/featurebench" \
    -seconds "${BENCH_FEATURE_SECONDS:-3}" -redis "${SLUICE_REDIS_ADDR:-127.0.0.1:6379}" \
    -out "${BENCH_FEATURES_OUT:-bench/results/features.md}"
fi

# Gateway: the proxy hop (direct vs HAProxy vs the Sluice gateway, open
# loop at a fixed rate) and the full chain (gateway -> features from Redis
# -> parcel_eta) at rising rates, written to bench/results/gateway.md. The
# harness starts and stops its own servers (by pid) and deletes its Redis
# keys. HAProxy is a Debian package, installed only when running as root.
if [ "${BENCH_GATEWAY:-1}" != 0 ]; then
  say "gateway benchmark"
  if ! command -v haproxy >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      say "installing the Debian package haproxy"
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -qq --no-install-recommends haproxy >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq --no-install-recommends haproxy >/dev/null; } ||
        say "could not install haproxy; the HAProxy rows are left out"
    else
      say "haproxy missing (not root, so not installing); the HAProxy rows are left out"
    fi
  fi
  GW_SECS="${BENCH_GATEWAY_SECONDS:-10}"
  GW_CHAIN_SECS="${BENCH_GATEWAY_CHAIN_SECONDS:-6}"
  go build -o "$WORK/gatewaybench" ./bench/cmd/gatewaybench
  timeout --signal=TERM --kill-after=30 900 "$WORK/gatewaybench" \
    -sluice-bin "$BIN" -peers "$PEERS" -seconds "$GW_SECS" -chain-seconds "$GW_CHAIN_SECS" \
    -redis "${SLUICE_REDIS_ADDR:-127.0.0.1:6379}" \
    -command "$invoked  # BENCH_GATEWAY_SECONDS=$GW_SECS BENCH_GATEWAY_CHAIN_SECONDS=$GW_CHAIN_SECS" \
    -out "${BENCH_GATEWAY_OUT:-bench/results/gateway.md}"
fi
[ "${BENCH_TORCH:-1}" = 0 ] || SLUICE_BIN="$BIN" BENCH_PEERS_DIR="$PEERS" bench/torch.sh # PyTorch serving (issue 14): bench/results/pytorch.md; BENCH_TORCH=0 leaves it out
