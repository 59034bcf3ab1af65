# lib.sh — what the benchmark scripts share (sourced by run.sh and torch.sh):
# processes they start and stop by pid, free loopback ports, readiness waits.
# The sourcing script sets PY (the Python that prints a free port) and
# BENCH_NAME (the prefix of its messages) first.

say() { echo "${BENCH_NAME:-bench}: $*" >&2; }

WORK="$(mktemp -d)"
PIDS=()
# cleanup stops every pid in PIDS (SIGTERM, SIGKILL after 10 s) and removes WORK.
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

free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

wait_ready() { # name url pid log [seconds, default 60]
  local i secs="${5:-60}"
  for i in $(seq $((secs * 10))); do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "$2" || true)" = 200 ]; then
      say "$1 ready"
      return 0
    fi
    if ! kill -0 "$3" 2>/dev/null; then
      say "$1 exited before it was ready; its log:"; tail -n 30 "$4" >&2; return 1
    fi
    sleep 0.1
  done
  say "$1 not ready after $secs s; its log:"; tail -n 30 "$4" >&2; return 1
}

# tree_ticks PID: user + system clock ticks of PID and every descendant.
tree_ticks() {
  local p t=0
  for p in $(ps -e -o pid=,ppid= | awk -v r="$1" '
      { parent[$1] = $2 }
      END { keep[r] = 1; grew = 1
            while (grew) { grew = 0; for (k in parent) if (!(k in keep) && (parent[k] in keep)) { keep[k] = 1; grew = 1 } }
            for (k in keep) print k }'); do
    [ -r "/proc/$p/stat" ] && t=$((t + $(sed 's/.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
  done
  echo "$t"
}
