#!/bin/bash
# One Triton QA measurement of Sluice: builds Triton's Python client from
# Triton's client repository, makes the ONNX models with Triton's own
# generators, then runs each named L0 directory's own test.sh, unchanged,
# against `sluice model-server --server-name triton`, and prints the
# unittest case counts per directory and in total.
#
# usage: run.sh [L0_dir[:VAR=value,VAR=value] ...]
#   TRITON_SERVER_SRC  checkout of triton-inference-server/server (required)
#   TRITON_CLIENT_SRC  checkout of triton-inference-server/client (required)
#   TRITON_COMMON_SRC  checkout of triton-inference-server/common (required)
#   SLUICE             the sluice binary (default: bin/sluice of this tree)
#   QA_WORK            work directory (default: ${TMPDIR:-/tmp}/sluice-triton-qa);
#                      the client and the generated models are kept there
#   QA_TIMEOUT         seconds one directory's test.sh may run (default 1800)
#
# Each test.sh runs in private network and mount namespaces (root needed:
# unshare -mn), so the fixed ports 8000-8002 are free and the paths the
# scripts hard-code exist there only: /opt/tritonserver/bin/tritonserver is
# tritonserver.sh (which starts Sluice), /opt/tritonserver/qa is the copied
# qa tree, /data/inferenceserver/qa is the generated model directory.
# `python`/`python3` in the scripts' PATH record every unittest summary,
# which is what the counts are read from.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
: "${TRITON_SERVER_SRC:?set TRITON_SERVER_SRC to a checkout of triton-inference-server/server}"
: "${TRITON_CLIENT_SRC:?set TRITON_CLIENT_SRC to a checkout of triton-inference-server/client}"
: "${TRITON_COMMON_SRC:?set TRITON_COMMON_SRC to a checkout of triton-inference-server/common}"
sluice=${SLUICE:-$root/bin/sluice}
work=${QA_WORK:-${TMPDIR:-/tmp}/sluice-triton-qa}
timeout_s=${QA_TIMEOUT:-1800}
export PYTHON=${PYTHON:-/usr/bin/python3}

if [ "$(id -u)" != 0 ]; then
	echo "run.sh needs root for unshare -mn" >&2
	exit 2
fi
[ -x "$sluice" ] || { echo "no sluice binary at $sluice (make build)" >&2; exit 2; }

mkdir -p "$work"
[ -d "$work/pylib/tritonclient" ] && [ -d "$work/pylib/tritonhttpclient" ] || "$here/build_client.sh" "$TRITON_CLIENT_SRC" "$TRITON_COMMON_SRC" "$work/pylib"
"$here/gen_models.sh" "$TRITON_SERVER_SRC" "$work/data"
# Mount points for the namespaces' private mounts.
mkdir -p /data

dirs=("$@")
if [ ${#dirs[@]} = 0 ]; then
	mapfile -t dirs <"$here/dirs.txt"
fi

results=$work/results
rm -rf "$results"
mkdir -p "$results"
total_ran=0 total_bad=0
for spec in "${dirs[@]}"; do
	case $spec in ''|'#'*) continue ;; esac
	dir=${spec%%:*}
	vars=
	[ "$dir" != "$spec" ] && vars=${spec#*:}
	label=$dir${vars:+_$(echo "$vars" | tr ',=' '_-')}
	run=$work/runs/$label
	rm -rf "$run"
	mkdir -p "$run/records"
	cp -r "$TRITON_SERVER_SRC/qa" "$run/qa"
	"$here/ci_setup.sh" "$TRITON_SERVER_SRC" "$TRITON_CLIENT_SRC" "$run/qa" 2>>"$run/test.sh.setup"
	env_args=()
	IFS=, read -ra kv <<<"$vars"
	for v in "${kv[@]}"; do env_args+=("$v"); done
	start=$(date +%s)
	set +e
	unshare -mn --propagation private \
		env QA_RUN="$run" QA_HERE="$here" QA_DATA="$work/data" QA_PYLIB="$work/pylib" \
		SLUICE="$sluice" PYTHON="$PYTHON" "${env_args[@]}" \
		timeout -k 30 "$timeout_s" "$here/in_namespace.sh" "$dir" >"$run/test.sh.out" 2>&1
	rc=$?
	set -e
	read -r ran bad <<<"$("$PYTHON" "$here/count.py" "$run/records" "$results/$label.txt")"
	total_ran=$((total_ran + ran))
	total_bad=$((total_bad + bad))
	note=
	# A test.sh that cannot start the server exits before its cases run,
	# so they are not in the counts: say so.
	if grep -q 'Failed to start' "$run/test.sh.out"; then
		note=" server start failed (see $run/test.sh.out)"
	fi
	printf '%-50s %4d cases %4d pass %4d fail  test.sh rc=%d %ds%s\n' "$label" "$ran" $((ran - bad)) "$bad" "$rc" $(($(date +%s) - start)) "$note"
done
if [ "$total_ran" -gt 0 ]; then
	printf 'TOTAL %d cases, %d pass, %d fail (%d %%)\n' "$total_ran" $((total_ran - total_bad)) "$total_bad" $((100 * (total_ran - total_bad) / total_ran))
fi
echo "per-case failures: $results/"
