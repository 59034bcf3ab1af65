#!/usr/bin/env bash
# torch.sh — the PyTorch benchmark of issue 14: parcel ETA served by Sluice
# as a TorchScript model (parcel_eta_ts) and as state_dict + model.py
# (parcel_eta_torch), each with dynamic batching off and on, vs the ONNX
# version (parcel_eta) and vs the Flask + gunicorn + PyTorch peer, in one run;
# writes bench/results/pytorch.md (also printed to stdout).
#
# Starts, on free 127.0.0.1 ports: bin/sluice serving a temporary repository
# that holds
#   parcel_eta_ts, parcel_eta_torch                 batching off, N instances
#   parcel_eta_ts_batched, parcel_eta_torch_batched batching on, N instances
#   parcel_eta                                      the ONNX model as shipped
# (N = BENCH_TORCH_INSTANCES, default: the number of cores; one worker
# process per instance, one torch thread each, as the example configs say),
# and the Flask peer from bench/peers under gunicorn (one sync worker per
# core, one torch thread each, as its README says). The harness
# (bench/cmd/torchbench) drives every row with `bin/sluice perf` over HTTP
# JSON (the peer speaks KServe v2 JSON only) at each concurrency and at fixed
# offered rates, and takes server CPU per inference from /proc: the Sluice
# process and its Python workers, every gunicorn process for the peer.
# Every process this script starts is stopped by pid, whatever happens.
#
# Environment (defaults in brackets):
#   BENCH_TORCH_WINDOW_MS [2000]       sluice perf measurement window
#   BENCH_TORCH_MAX_TRIALS [4]         sluice perf windows per level at most (>= 3)
#   BENCH_TORCH_CONCURRENCY [1,8,32]   closed-loop concurrency levels
#   BENCH_TORCH_RATES [200]            fixed offered rates (open loop), requests/s
#   BENCH_TORCH_INSTANCES [nproc]      instance_group count of every PyTorch model
#   BENCH_TORCH_BATCH_DELAY_US [0]     max_queue_delay_microseconds of the *_batched models
#   BENCH_TORCH_OUT [bench/results/pytorch.md]
#   BENCH_PEERS_DIR [<repo>/bench/peers]
#   SLUICE_BIN [bin/sluice]
# With the defaults the run takes 3 to 4 minutes; the harness is killed
# after 8 minutes whatever happens.
set -euo pipefail

ROOT="$(git -C "$(dirname "$0")" rev-parse --show-toplevel 2>/dev/null || (cd "$(dirname "$0")/.." && pwd))"
cd "$ROOT"

WINDOW_MS="${BENCH_TORCH_WINDOW_MS:-2000}"
TRIALS="${BENCH_TORCH_MAX_TRIALS:-4}"
LEVELS="${BENCH_TORCH_CONCURRENCY:-1,8,32}"
RATES="${BENCH_TORCH_RATES-200}"
CORES="$(nproc)"
INSTANCES="${BENCH_TORCH_INSTANCES:-$CORES}"
DELAY_US="${BENCH_TORCH_BATCH_DELAY_US:-0}"
OUT="${BENCH_TORCH_OUT:-bench/results/pytorch.md}"
PEERS="${BENCH_PEERS_DIR:-$ROOT/bench/peers}"
BIN="${SLUICE_BIN:-bin/sluice}"
PY=/usr/bin/python3 # Debian's python3-torch and python3-flask live here

BENCH_NAME=torchbench
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

[ -x "$BIN" ] || { say "$BIN not found; run 'make build'"; exit 1; }
[ -f "$PEERS/flask_kserve_peer.py" ] || { say "no peer at $PEERS/flask_kserve_peer.py"; exit 1; }

# The workers and the peer need Debian's packages; installed only as root.
missing=()
"$PY" -c 'import numpy' 2>/dev/null || missing+=(python3-numpy)
"$PY" -c 'import torch' 2>/dev/null || missing+=(python3-torch)
"$PY" -c 'import flask' 2>/dev/null || missing+=(python3-flask)
"$PY" -c 'import gunicorn' 2>/dev/null || missing+=(gunicorn)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
      { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
  else
    say "missing ${missing[*]} (not root, so not installing)"; exit 1
  fi
fi


say "building the harness"
go build -o "$WORK/torchbench" ./bench/cmd/torchbench

# variant SRC NAME MODE: copy examples/models/SRC as NAME with INSTANCES
# instances; MODE "off" removes its dynamic_batching block, "on" sets its
# max_queue_delay_microseconds to DELAY_US.
variant() {
  cp -r "examples/models/$1" "$REPO/$2"
  "$PY" - "$REPO/$2/config.pbtxt" "$1" "$2" "$3" "$DELAY_US" "$INSTANCES" <<'PYEOF'
import re, sys
path, src, name, mode, delay, count = sys.argv[1:7]
cfg = open(path).read().replace(f'name: "{src}"', f'name: "{name}"', 1)
block = re.compile(r"dynamic_batching\s*\{[^{}]*\}\n?")
if not block.search(cfg):
    sys.exit(f"{path}: no dynamic_batching block to change")
if mode == "on":
    cfg = re.sub(r"max_queue_delay_microseconds:\s*\d+", f"max_queue_delay_microseconds: {delay}", cfg, count=1)
else:
    cfg = block.sub("", cfg, count=1)
cfg, n = re.subn(r"(instance_group\s*\[\s*\{[^}]*count:\s*)\d+", rf"\g<1>{count}", cfg, count=1)
if n != 1:
    sys.exit(f"{path}: no instance_group count to change")
open(path, "w").write(cfg)
PYEOF
}

REPO="$WORK/models"
mkdir -p "$REPO"
cp -r examples/models/parcel_eta "$REPO/parcel_eta"
variant parcel_eta_ts parcel_eta_ts off
variant parcel_eta_ts parcel_eta_ts_batched on
variant parcel_eta_torch parcel_eta_torch off
variant parcel_eta_torch parcel_eta_torch_batched on

HTTP_PORT="$(free_port)"; GRPC_PORT="$(free_port)"; METRICS_PORT="$(free_port)"
"$BIN" serve --model-repository "$REPO" --address 127.0.0.1 \
  --http-port "$HTTP_PORT" --grpc-port "$GRPC_PORT" --metrics-port "$METRICS_PORT" \
  --log-level warn >"$WORK/sluice.log" 2>&1 &
SLUICE_PID=$!
PIDS+=("$SLUICE_PID")
wait_ready sluice "http://127.0.0.1:$HTTP_PORT/v2/health/ready" "$SLUICE_PID" "$WORK/sluice.log" 90

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
wait_ready "flask peer" "http://127.0.0.1:$PEER_PORT/v2/health/ready" "$PEER_PID" "$WORK/peer.log" 90

if [ -n "${MAKELEVEL:-}" ]; then invoked="make bench"; else invoked="bench/torch.sh"; fi
cmdline="$invoked  # BENCH_TORCH_WINDOW_MS=$WINDOW_MS BENCH_TORCH_MAX_TRIALS=$TRIALS BENCH_TORCH_CONCURRENCY=$LEVELS BENCH_TORCH_RATES=$RATES BENCH_TORCH_INSTANCES=$INSTANCES BENCH_TORCH_BATCH_DELAY_US=$DELAY_US"
setup="PyTorch models: instance_group count $INSTANCES (one worker process each), INTRA_OP_THREAD_COUNT 1 (as shipped); *_batched: dynamic_batching { max_queue_delay_microseconds: $DELAY_US }, others without dynamic_batching. parcel_eta (ONNX) as shipped (1 instance, intra_op_thread_count 1, dynamic_batching with delay 0). Peer: gunicorn -w $CORES --threads 1 (sync workers), PEER_TORCH_THREADS=1, serving examples/torchscript/parcel_eta.pt."
torchver="$("$PY" -c 'import torch, sys; print(f"torch {torch.__version__}, Python {sys.version.split()[0]}")' 2>/dev/null || echo unknown)"

say "running the harness"
timeout --signal=TERM --kill-after=10 480 "$WORK/torchbench" \
  -sluice-bin "$BIN" -sluice-http "127.0.0.1:$HTTP_PORT" -sluice-pid "$SLUICE_PID" \
  -peer-http "127.0.0.1:$PEER_PORT" -peer-pid "$PEER_PID" \
  -window "${WINDOW_MS}ms" -max-trials "$TRIALS" -concurrency "$LEVELS" -rates "$RATES" \
  -setup "$setup" -versions "$torchver" -command "$cmdline" -out "$OUT"
