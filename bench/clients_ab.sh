#!/usr/bin/env bash
# clients_ab.sh — two Sluice binaries (a base and a candidate) side by side
# with the trivial Go server and the Flask peer, on bench/clients.sh's
# saturation and fixed-rate rows (same hey flags, same body, server CPU per
# request from /proc the same way), the two Sluice rows alternated in order
# each round. For before/after comparisons on a shared machine, where only
# rows of one run compare.
#
#   SLUICE_BASE_BIN=path/to/old/sluice bench/clients_ab.sh
#   SLUICE_BIN [bin/sluice]  the candidate ("new" rows; the base is "main")
#   N [8000] requests per c=32 row (Flask: a quarter)
#   RS [8] seconds per fixed-rate row (hey -c 20 -q 50: 1,000/s)
#   ROUNDS [2]
#   PROF [unset] a folder: perf record -g of the Sluice servers in the
#     fixed-rate rows, and of the candidate in round 1's c=32 row (that row
#     then pays for the recording)
set -euo pipefail
ROOT="$(git -C "$(dirname "$0")" rev-parse --show-toplevel 2>/dev/null || (cd "$(dirname "$0")/.." && pwd))"
cd "$ROOT"
PY=/usr/bin/python3; BENCH_NAME=clients_ab
. bench/lib.sh
HEY="${HEY:-hey}"; BODY=examples/requests/parcel_eta.json; TCK=$(getconf CLK_TCK)
N="${N:-8000}"; RS="${RS:-8}"; ROUNDS="${ROUNDS:-2}"; PROF="${PROF:-}"
go build -o "$WORK/trivialserver" ./bench/cmd/trivialserver
mkdir -p "$WORK/models"; cp -r examples/models/parcel_eta "$WORK/models/"
start_sluice() { # bin name -> sets SPID SPORT
  local hp gp mp; hp=$(free_port); gp=$(free_port); mp=$(free_port)
  "$1" serve --model-repository "$WORK/models" --address 127.0.0.1 --http-port "$hp" --grpc-port "$gp" --metrics-port "$mp" --log-level warn >"$WORK/$2.log" 2>&1 &
  SPID=$!; PIDS+=("$SPID"); SPORT=$hp; wait_ready "$2" "http://127.0.0.1:$hp/v2/models/parcel_eta/ready" "$SPID" "$WORK/$2.log" 120
}
start_sluice "${SLUICE_BASE_BIN:?set SLUICE_BASE_BIN to the base binary}" main; MAIN_PID=$SPID; MAIN_PORT=$SPORT
start_sluice "${SLUICE_BIN:-bin/sluice}" new; NEW_PID=$SPID; NEW_PORT=$SPORT
TP=$(free_port); "$WORK/trivialserver" -listen "127.0.0.1:$TP" >"$WORK/t.log" 2>&1 & TPID=$!; PIDS+=("$TPID")
wait_ready trivial "http://127.0.0.1:$TP/v2/health/ready" "$TPID" "$WORK/t.log"
PP=$(free_port)
PEER_MODEL="$PWD/examples/torchscript/parcel_eta.pt" PEER_NAME=parcel_eta PEER_INPUTS=user_features,package_features,route_features \
PEER_OUTPUTS=eta_prediction,confidence_score PEER_TORCH_THREADS=1 \
  "$PY" -m gunicorn -w "$(nproc)" --threads 1 -b "127.0.0.1:$PP" --chdir "$PWD/bench/peers" 'flask_kserve_peer:app' >"$WORK/p.log" 2>&1 &
PPID_=$!; PIDS+=("$PPID_"); wait_ready flask "http://127.0.0.1:$PP/v2/health/ready" "$PPID_" "$WORK/p.log" 90
u() { echo "http://127.0.0.1:$1/v2/models/parcel_eta/infer"; }
for p in $MAIN_PORT $NEW_PORT $TP; do $HEY -n 2000 -c 32 -m POST -T application/json -D $BODY "$(u $p)" >/dev/null; done
$HEY -n 400 -c 8 -m POST -T application/json -D $BODY "$(u $PP)" >/dev/null
row() { # name pid port kind
  local b a out=$WORK/out.txt
  b=$(tree_ticks "$2")
  if [ "$4" = c32 ]; then
    if [ -n "$PROF" ] && [ "$1" = new ] && [ "$r" = 1 ]; then perf record -q -F 999 -g -p "$2" -o "$PROF/$1-$4-r$r.perf.data" -- sleep 3 >/dev/null 2>&1 & PERFPID=$!; fi
    $HEY -n "$5" -c 32 -m POST -T application/json -D $BODY -disable-compression "$(u $3)" >$out; [ -z "${PERFPID:-}" ] || wait "$PERFPID" 2>/dev/null || true; PERFPID=
  else
    if [ -n "$PROF" ] && [ "$1" != trivial ] && [ "$1" != flask ]; then perf record -q -F 999 -g -p "$2" -o "$PROF/$1-$4-r$r.perf.data" -- sleep 5 >/dev/null 2>&1 & PERFPID=$!; fi
    $HEY -z "${RS}s" -c 20 -q 50 -m POST -T application/json -D $BODY -disable-compression "$(u $3)" >$out; [ -z "${PERFPID:-}" ] || wait "$PERFPID" 2>/dev/null || true; PERFPID=
  fi
  a=$(tree_ticks "$2")
  awk -v d=$((a-b)) -v t=$TCK -v name="$1" -v k="$4" -v r="$r" '/Requests\/sec/ {rps=$2} /\[200\]/ {n+=$2} / 50%+ in / {p50=$3*1000} / 99%+ in / {p99=$3*1000}
    END {printf "r%s\t%s\t%s\t%.0f rps\t%d ok\tp50 %.2f ms\tp99 %.2f ms\t%.1f us/req\n", r, k, name, rps, n, p50, p99, d/t*1e6/n}' $out | tee -a $WORK/rows
}
echo "load start: $(cat /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then A="main $MAIN_PID $MAIN_PORT"; B="new $NEW_PID $NEW_PORT"; else A="new $NEW_PID $NEW_PORT"; B="main $MAIN_PID $MAIN_PORT"; fi
  row $A c32 "$N"; row $B c32 "$N"; row flask "$PPID_" "$PP" c32 $((N/4))
  row $A rate; row $B rate; row trivial "$TPID" "$TP" rate; row flask "$PPID_" "$PP" rate
done
echo "load end: $(cat /proc/loadavg)"
sort -k2,2 -k3,3 $WORK/rows
