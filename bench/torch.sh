#!/usr/bin/env bash
# torch.sh — the PyTorch benchmark: parcel ETA served by Sluice as a
# TorchScript model (parcel_eta_ts) in-process through libtorch and through
# the Python worker, and as state_dict + model.py (parcel_eta_torch), each
# with dynamic batching off and on, vs the ONNX version (parcel_eta) and vs
# the Flask + gunicorn + PyTorch peer, in one run; writes
# bench/results/pytorch.md (also printed to stdout).
#
# Starts, on free 127.0.0.1 ports: bin/sluice serving a temporary repository
# that holds
#   parcel_eta_ts, parcel_eta_torch                 batching off, N instances
#   parcel_eta_ts_batched, parcel_eta_torch_batched batching on, N instances
#   parcel_eta_ts_worker, parcel_eta_ts_worker_batched
#                                                   the TorchScript model with
#                                                   SLUICE_PYTORCH_ENGINE python
#   parcel_eta                                      the ONNX model as shipped
# (N = BENCH_TORCH_INSTANCES, default: the number of cores; one torch thread
# per instance, as the example configs say; a worker process per instance on
# the Python worker), and the Flask peer from bench/peers under gunicorn (one
# sync worker per core, one torch thread each, as its README says). The
# TorchScript rows without _worker must run in-process: the script stops
# when the server says libtorch's shim is missing (make deps builds it).
# The harness (bench/cmd/torchbench) drives every row with `bin/sluice perf`
# over HTTP JSON (the peer speaks KServe v2 JSON only) at each concurrency
# and at fixed offered rates, and takes server CPU per inference from /proc:
# the Sluice process and its Python workers, every gunicorn process for the
# peer. Then hey (Go's default transport) at c=32 drives the shipped
# TorchScript config (one instance, dynamic batching, delay 0) in-process,
# the same config on the Python worker, and the peer, BENCH_TORCH_HEY_ROUNDS
# times with the rows alternated, CPU per request from /proc as above; the
# report gets a section for it.
# Every process this script starts is stopped by pid, whatever happens.
#
# Environment (defaults in brackets):
#   BENCH_TORCH_WINDOW_MS [2000]       sluice perf measurement window
#   BENCH_TORCH_MAX_TRIALS [4]         sluice perf windows per level at most (>= 3)
#   BENCH_TORCH_CONCURRENCY [1,8,32]   closed-loop concurrency levels
#   BENCH_TORCH_RATES [200]            fixed offered rates (open loop), requests/s
#   BENCH_TORCH_INSTANCES [nproc]      instance_group count of every PyTorch model
#   BENCH_TORCH_BATCH_DELAY_US [0]     max_queue_delay_microseconds of the *_batched models
#   BENCH_TORCH_HEY_REQUESTS [20000]   requests per hey row (the peer: a quarter)
#   BENCH_TORCH_HEY_ROUNDS [2]         hey rounds (0: no hey section)
#   BENCH_TORCH_BLAS_DIR [unset]       a folder holding another libblas.so.3 (e.g.
#                                      Debian's libopenblas0-serial unpacked with
#                                      dpkg -x): every server (Sluice, its workers,
#                                      the peer) runs with LD_LIBRARY_PATH set to it,
#                                      so libtorch's matrix products use that BLAS
#   BENCH_TORCH_OUT [bench/results/pytorch.md]
#   BENCH_PEERS_DIR [<repo>/bench/peers]
#   SLUICE_BIN [bin/sluice], HEY [hey on PATH, else installed from the Go module proxy]
# With the defaults the run takes 5 to 6 minutes; the harness is killed
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
BLAS_DIR="${BENCH_TORCH_BLAS_DIR:-}"
if [ -n "$BLAS_DIR" ]; then
  [ -e "$BLAS_DIR/libblas.so.3" ] || { say "no libblas.so.3 in BENCH_TORCH_BLAS_DIR=$BLAS_DIR"; exit 1; }
  export LD_LIBRARY_PATH="$BLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
HEY_N="${BENCH_TORCH_HEY_REQUESTS:-20000}"
HEY_ROUNDS="${BENCH_TORCH_HEY_ROUNDS:-2}"

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
# The harness and hey need no BLAS; only the servers get BENCH_TORCH_BLAS_DIR.
LD_LIBRARY_PATH= go build -o "$WORK/torchbench" ./bench/cmd/torchbench

# variant SRC NAME MODE [ENGINE]: copy examples/models/SRC as NAME with
# INSTANCES instances; MODE "off" removes its dynamic_batching block, "on"
# sets its max_queue_delay_microseconds to DELAY_US, "shipped" keeps the
# config as it is; ENGINE "python" adds SLUICE_PYTORCH_ENGINE python.
variant() {
  cp -r "examples/models/$1" "$REPO/$2"
  "$PY" - "$REPO/$2/config.pbtxt" "$1" "$2" "$3" "$DELAY_US" "$INSTANCES" "${4:-}" <<'PYEOF'
import re, sys
path, src, name, mode, delay, count, engine = sys.argv[1:8]
if engine:
    open(path, "a").write(f'parameters {{\n  key: "SLUICE_PYTORCH_ENGINE"\n  value: {{ string_value: "{engine}" }}\n}}\n')
cfg = open(path).read().replace(f'name: "{src}"', f'name: "{name}"', 1)
if mode == "shipped":
    open(path, "w").write(cfg)
    sys.exit(0)
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
variant parcel_eta_ts parcel_eta_ts_worker off python
variant parcel_eta_ts parcel_eta_ts_worker_batched on python
variant parcel_eta_ts parcel_eta_ts_shipped shipped
variant parcel_eta_ts parcel_eta_ts_shipped_worker shipped python
variant parcel_eta_torch parcel_eta_torch off
variant parcel_eta_torch parcel_eta_torch_batched on

HTTP_PORT="$(free_port)"; GRPC_PORT="$(free_port)"; METRICS_PORT="$(free_port)"
"$BIN" serve --model-repository "$REPO" --address 127.0.0.1 \
  --http-port "$HTTP_PORT" --grpc-port "$GRPC_PORT" --metrics-port "$METRICS_PORT" \
  --log-level warn >"$WORK/sluice.log" 2>&1 &
SLUICE_PID=$!
PIDS+=("$SLUICE_PID")
wait_ready sluice "http://127.0.0.1:$HTTP_PORT/v2/health/ready" "$SLUICE_PID" "$WORK/sluice.log" 90
if grep -q "run in the Python worker" "$WORK/sluice.log"; then
  say "the server runs TorchScript models in the Python worker only:"; cat "$WORK/sluice.log" >&2
  say "run make deps (or scripts/build-torch-shim.sh) for the in-process rows"; exit 1
fi

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

# The shim's own BLAS (scripts/build-torch-shim.sh unpacks OpenBLAS beside
# it) serves Sluice, in-process and on its PyTorch workers, unless
# BENCH_TORCH_BLAS_DIR puts another first on every server's LD_LIBRARY_PATH.
shim_blas="${SLUICE_TORCH_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/libtorch-shim}/blas"
system_blas="the system's libblas.so.3, $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null | sed 's|.*/x86_64-linux-gnu/||')"
if [ -n "$BLAS_DIR" ]; then
  blas_desc="libblas.so.3 from $(basename "$BLAS_DIR") (LD_LIBRARY_PATH of every server)"
elif [ -e "$shim_blas/libblas.so.3" ]; then
  blas_desc="Sluice (in-process and its PyTorch workers): the OpenBLAS the libtorch shim bundles (Debian's libopenblas0-serial $(cat "$shim_blas/.version" 2>/dev/null)); the peer: $system_blas"
else
  blas_desc="$system_blas"
fi
if [ -n "${MAKELEVEL:-}" ]; then invoked="make bench"; else invoked="bench/torch.sh"; fi
cmdline="$invoked  # ${BLAS_DIR:+BENCH_TORCH_BLAS_DIR=<$(basename "$BLAS_DIR")> }BENCH_TORCH_WINDOW_MS=$WINDOW_MS BENCH_TORCH_MAX_TRIALS=$TRIALS BENCH_TORCH_CONCURRENCY=$LEVELS BENCH_TORCH_RATES=$RATES BENCH_TORCH_INSTANCES=$INSTANCES BENCH_TORCH_BATCH_DELAY_US=$DELAY_US"
setup="PyTorch models: instance_group count $INSTANCES (in-process: one libtorch module each; Python worker: one worker process each), INTRA_OP_THREAD_COUNT 1 (as shipped); *_batched: dynamic_batching { max_queue_delay_microseconds: $DELAY_US }, others without dynamic_batching. parcel_eta (ONNX) as shipped (1 instance, intra_op_thread_count 1, dynamic_batching with delay 0). Peer: gunicorn -w $CORES --threads 1 (sync workers), PEER_TORCH_THREADS=1, serving examples/torchscript/parcel_eta.pt. BLAS behind libtorch: $blas_desc."
torchver="$("$PY" -c 'import torch, sys; print(f"torch {torch.__version__}, Python {sys.version.split()[0]}")' 2>/dev/null || echo unknown); libtorch-dev $(dpkg-query -W -f='${Version}' libtorch-dev 2>/dev/null || echo unknown)"

say "running the harness"
timeout --signal=TERM --kill-after=10 480 "$WORK/torchbench" \
  -sluice-bin "$BIN" -sluice-http "127.0.0.1:$HTTP_PORT" -sluice-pid "$SLUICE_PID" \
  -peer-http "127.0.0.1:$PEER_PORT" -peer-pid "$PEER_PID" \
  -window "${WINDOW_MS}ms" -max-trials "$TRIALS" -concurrency "$LEVELS" -rates "$RATES" \
  -setup "$setup" -versions "$torchver" -command "$cmdline" -out "$OUT"

[ "$HEY_ROUNDS" -gt 0 ] || exit 0
if [ -n "${HEY:-}" ]; then :; elif command -v hey >/dev/null; then HEY=hey; else
  say "installing hey from the Go module proxy"
  GOBIN="$WORK/bin" go install github.com/rakyll/hey@v0.1.5 && HEY="$WORK/bin/hey"
fi
BODY=examples/requests/parcel_eta.json
TCK="$(getconf CLK_TCK)"
base="http://127.0.0.1:$HTTP_PORT/v2/models"
peer_url="http://127.0.0.1:$PEER_PORT/v2/models/parcel_eta/infer"
HEY_ROWS="$WORK/hey.tsv"
: >"$HEY_ROWS"
# hey_row LABEL PID URL N: hey at c=32, the server tree's CPU meanwhile.
hey_row() {
  local before after rps ok p50 p99 cpu
  before="$(tree_ticks "$2")"
  "$HEY" -n "$4" -c 32 -m POST -T application/json -D "$BODY" -disable-compression "$3" >"$WORK/hey.txt"
  after="$(tree_ticks "$2")"
  rps="$(awk '/Requests\/sec/ {printf "%.0f", $2}' "$WORK/hey.txt")"
  ok="$(awk '/\[200\]/ {s += $2} END {print s + 0}' "$WORK/hey.txt")"
  p50="$(awk '/ 50%+ in / {printf "%.2f", $3 * 1000}' "$WORK/hey.txt")"
  p99="$(awk '/ 99%+ in / {printf "%.2f", $3 * 1000}' "$WORK/hey.txt")"
  cpu="$(awk -v d=$((after - before)) -v n="$ok" -v t="$TCK" 'BEGIN { if (n > 0) printf "%.0f", d / t * 1e6 / n; else print "n/a" }')"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$round" "$rps" "$ok" "$p50" "$p99" "$cpu" >>"$HEY_ROWS"
  say "hey c=32 | $1 | round $round: $rps/s, $ok ok, server CPU $cpu µs/request"
}
say "hey at c=32: warming up"
for m in parcel_eta_ts_shipped parcel_eta_ts_shipped_worker; do
  "$HEY" -n 2000 -c 32 -m POST -T application/json -D "$BODY" "$base/$m/infer" >/dev/null
done
"$HEY" -n 500 -c 8 -m POST -T application/json -D "$BODY" "$peer_url" >/dev/null
hey_load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$HEY_ROUNDS"); do
  hey_row "Sluice, TorchScript in-process (libtorch)" "$SLUICE_PID" "$base/parcel_eta_ts_shipped/infer" "$HEY_N"
  hey_row "Sluice, TorchScript via Python worker" "$SLUICE_PID" "$base/parcel_eta_ts_shipped_worker/infer" "$HEY_N"
  hey_row "Flask + gunicorn + PyTorch (peer)" "$PEER_PID" "$peer_url" $((HEY_N / 4))
done
hey_load_end="$(cut -d' ' -f1-3 /proc/loadavg)"
{
  echo
  echo
  echo "## hey at c=32: the shipped TorchScript config, in-process vs the Python worker"
  echo
  echo "\`${HEY##*/} -n $HEY_N -c 32 -m POST -T application/json -D $BODY -disable-compression <url>\` (the peer: -n $((HEY_N / 4))), $HEY_ROUNDS rounds with the rows alternated, after a warm-up. parcel_eta_ts as shipped (1 instance, INTRA_OP_THREAD_COUNT 1, dynamic batching with delay 0), once in-process and once with SLUICE_PYTORCH_ENGINE python; the peer as above. Server CPU per request: utime + stime of the server's process tree from /proc around each hey run. Load average (1, 5, 15 min) $hey_load_start before, $hey_load_end after; hey shares the machine."
  echo
  echo "| system | round | requests/s | 200s | p50 ms | p99 ms | server CPU/request | × peer |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  awk -F'\t' '$1 ~ /peer/ { peer[$2] = $7 } { row[NR] = $0 } END {
    for (i = 1; i <= NR; i++) { split(row[i], f, "\t"); x = (peer[f[2]] > 0 && f[7] + 0 > 0) ? sprintf("%.2f", f[7] / peer[f[2]]) : ""
      if (f[1] ~ /peer/) x = ""
      printf "| %s | %s | %s | %s | %s | %s | %s µs | %s |\n", f[1], f[2], f[3], f[4], f[5], f[6], f[7], x } }' "$HEY_ROWS"
} | tee -a "$OUT"
