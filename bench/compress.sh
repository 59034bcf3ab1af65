#!/usr/bin/env bash
# compress.sh — the cost of response compression as real clients see it
# (issue 23): parcel_eta's KServe v2 JSON infer at concurrency 32 with `hey`,
# which uses Go's default transport and so sends `Accept-Encoding: gzip`
# unless told not to, against one or more sluice binaries. Rows alternate
# (binary A no-gzip, A gzip, B no-gzip, B gzip, ...) and repeat ROUNDS
# times; each row reports server CPU per request from /proc/PID/stat.
#
#   bench/compress.sh BIN [BIN...]
#   COMPRESS_REQUESTS [20000] requests per row, COMPRESS_ROUNDS [2],
#   HEY [hey on PATH, else `go run github.com/rakyll/hey@v0.1.5`]
#
# Prints a Markdown table; bench/results/compression.md holds a run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-python3}"
BENCH_NAME=compress
. bench/lib.sh

[ $# -ge 1 ] || { echo "usage: bench/compress.sh BIN [BIN...]" >&2; exit 2; }
N="${COMPRESS_REQUESTS:-20000}"
ROUNDS="${COMPRESS_ROUNDS:-2}"
if [ -n "${HEY:-}" ]; then :; elif command -v hey >/dev/null; then HEY=hey; else
  GOBIN="$WORK/bin" go install github.com/rakyll/hey@v0.1.5 && HEY="$WORK/bin/hey"
fi
BODY=examples/requests/parcel_eta.json
TCK="$(getconf CLK_TCK)"

cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }

echo "| binary | client | Accept-Encoding | requests/s | server CPU µs/request | response bytes |"
echo "|---|---|---|---|---|---|"
for round in $(seq "$ROUNDS"); do
  for bin in "$@"; do
    port="$(free_port)"
    "$bin" serve --address 127.0.0.1 --http-port "$port" --grpc-port "$(free_port)" --metrics-port "$(free_port)" \
      --model-repository examples/models --model-control-mode explicit --load-model parcel_eta \
      --log-format text >"$WORK/server.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    wait_ready "$bin" "http://127.0.0.1:$port/v2/models/parcel_eta/ready" "$pid" "$WORK/server.log" 120
    url="http://127.0.0.1:$port/v2/models/parcel_eta/infer"
    "$HEY" -n 2000 -c 32 -m POST -T application/json -D "$BODY" "$url" >/dev/null # warm-up
    for mode in plain gzip; do
      flags=()
      [ "$mode" = plain ] && flags=(-disable-compression)
      size="$(curl -s -o /dev/null -w '%{size_download}' -X POST -H 'Content-Type: application/json' \
        $([ "$mode" = gzip ] && echo "-H Accept-Encoding:gzip") --data-binary @"$BODY" "$url")"
      before="$(cpu_ticks "$pid")"
      out="$("$HEY" -n "$N" -c 32 -m POST -T application/json -D "$BODY" "${flags[@]}" "$url")"
      after="$(cpu_ticks "$pid")"
      rps="$(awk '/Requests\/sec/ {printf "%.0f", $2}' <<<"$out")"
      ok="$(awk '/\[200\]/ {print $2}' <<<"$out")"
      cpu="$(awk -v a="$after" -v b="$before" -v n="${ok:-0}" -v t="$TCK" 'BEGIN { if (n > 0) printf "%.1f", (a-b)/t*1e6/n; else print "n/a" }')"
      enc="none"; [ "$mode" = gzip ] && enc="gzip"
      echo "| $(basename "$bin") (round $round) | hey, c=32, $N requests | $enc | $rps | $cpu | $size |"
    done
    kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
  done
done
