#!/usr/bin/env bash
# run.sh — measure Sluice and its peers side by side and write
# bench/results/model-server.md (also printed to stdout).
#
# Starts, on free 127.0.0.1 ports: bin/sluice serving examples/models, and the
# Flask + gunicorn + PyTorch peer from ../shared/peers. Runs the Go harness
# (bench/cmd/modelbench) against them, then stops every process it started,
# by pid, whatever happens. `make bench` builds bin/sluice first.
#
# Environment (defaults in brackets):
#   BENCH_SECONDS [8]            seconds per cell
#   BENCH_WORKERS [8]            closed-loop workers
#   BENCH_RATE [500]             open-loop arrival rate, req/s
#   BENCH_MAX_REQUESTS [1000000] cap on requests per cell
#   BENCH_STARTUP_RUNS [5]       Sluice start-up measurements
#   BENCH_OUT [bench/results/model-server.md]
#   BENCH_PEERS_DIR [<repo>/../shared/peers]
#   BENCH_NO_PEER [unset]        set to 1 to leave the Flask peer out
#   SLUICE_BIN [bin/sluice]
set -euo pipefail

ROOT="$(git -C "$(dirname "$0")" rev-parse --show-toplevel 2>/dev/null || (cd "$(dirname "$0")/.." && pwd))"
cd "$ROOT"

SECS="${BENCH_SECONDS:-8}"
WORKERS="${BENCH_WORKERS:-8}"
RATE="${BENCH_RATE:-500}"
MAXREQ="${BENCH_MAX_REQUESTS:-1000000}"
STARTUP_RUNS="${BENCH_STARTUP_RUNS:-5}"
OUT="${BENCH_OUT:-bench/results/model-server.md}"
PEERS="${BENCH_PEERS_DIR:-$ROOT/../shared/peers}"
BIN="${SLUICE_BIN:-bin/sluice}"
PY=/usr/bin/python3 # Debian's python3-torch and python3-flask live here
CORES="$(nproc)"

say() { echo "bench: $*" >&2; }

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  local pid i
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    for i in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      say "pid $pid still running after 10 s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

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

free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

wait_ready() { # name url pid log
  local i
  for i in $(seq 600); do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "$2" || true)" = 200 ]; then
      say "$1 ready"
      return 0
    fi
    if ! kill -0 "$3" 2>/dev/null; then
      say "$1 exited before it was ready; its log:"; tail -n 30 "$4" >&2; return 1
    fi
    sleep 0.1
  done
  say "$1 not ready after 60 s; its log:"; tail -n 30 "$4" >&2; return 1
}

say "building the harness"
go build -o "$WORK/modelbench" ./bench/cmd/modelbench

HTTP_PORT="$(free_port)"; GRPC_PORT="$(free_port)"; METRICS_PORT="$(free_port)"
"$BIN" serve --model-repository examples/models --address 127.0.0.1 \
  --http-port "$HTTP_PORT" --grpc-port "$GRPC_PORT" --metrics-port "$METRICS_PORT" \
  --log-level warn >"$WORK/sluice.log" 2>&1 &
PIDS+=("$!")
wait_ready sluice "http://127.0.0.1:$HTTP_PORT/v2/health/ready" "$!" "$WORK/sluice.log"

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
  PIDS+=("$!")
  if wait_ready "flask peer" "http://127.0.0.1:$PEER_PORT/v2/health/ready" "$!" "$WORK/peer.log"; then
    peer_args=(-peer-http "http://127.0.0.1:$PEER_PORT"
      -peer-desc "Flask + gunicorn ($CORES sync workers, 1 torch thread each) + PyTorch")
  fi
fi

if [ -n "${MAKELEVEL:-}" ]; then invoked="make bench"; else invoked="bench/run.sh"; fi
cmdline="$invoked  # BENCH_SECONDS=$SECS BENCH_WORKERS=$WORKERS BENCH_RATE=$RATE BENCH_MAX_REQUESTS=$MAXREQ BENCH_STARTUP_RUNS=$STARTUP_RUNS"

say "running the harness (about $(( (SECS + 1) * 12 + STARTUP_RUNS * 2 )) s)"
timeout --signal=TERM --kill-after=10 600 "$WORK/modelbench" \
  -duration "${SECS}s" -workers "$WORKERS" -rate "$RATE" -max-requests "$MAXREQ" \
  -startup-runs "$STARTUP_RUNS" -sluice-bin "$BIN" -model-repository examples/models \
  -sluice-http "http://127.0.0.1:$HTTP_PORT" -sluice-grpc "127.0.0.1:$GRPC_PORT" \
  "${peer_args[@]}" -command "$cmdline" -out "$OUT"
