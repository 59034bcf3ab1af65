#!/bin/bash
# Stands in for /opt/tritonserver/bin/tritonserver inside run.sh's
# namespaces: starts `sluice model-server --server-name triton` with the
# arguments test.sh gives. Flags that only tune Triton's GPU memory, its
# backend shared libraries or its thread pools have no Sluice counterpart;
# they are dropped (and named on stderr, in the test's server log). Every
# other flag goes to Sluice as given, so a flag Sluice does not know fails
# the start as it would for a user.
drop='^--(backend-directory|cuda-virtual-address-size|cuda-memory-pool-byte-size|pinned-memory-pool-byte-size|min-supported-compute-capability|buffer-manager-thread-count|model-load-thread-count|model-load-retry-count|host-policy|disable-auto-complete-config-gpu)(=|$)'
args=()
while [ $# -gt 0 ]; do
	a=$1
	shift
	if [[ $a =~ $drop ]]; then
		if [[ $a != *=* && $# -gt 0 && $1 != --* ]]; then
			a="$a $1"
			shift
		fi
		echo "tritonserver.sh: dropped $a (no Sluice counterpart)" >&2
		continue
	fi
	args+=("$a")
done
# The measuring machine has no GPU. Triton's generators write KIND_GPU
# instance groups for many ONNX models (test.sh scripts then edit their
# counts); on a machine without a GPU Triton refuses those as Sluice does,
# so the groups are made KIND_CPU here, after the script's own edits, in the
# repositories this start serves (the run's copies).
for a in "${args[@]}"; do
	case $a in
	--model-repository=*) repo=${a#--model-repository=} ;;
	*) continue ;;
	esac
	[ -d "$repo" ] || continue
	find "$repo" -name config.pbtxt -exec grep -l KIND_GPU {} + 2>/dev/null |
		xargs -r sed -i -e 's/KIND_GPU/KIND_CPU/' -e '/^[[:space:]]*gpus[[:space:]]*:/d'
	# Triton's C++ test backends (identity, implicit_state, dyna_sequence):
	# standin/<backend>_model.py under the python backend, in each numeric
	# version directory.
	for b in identity implicit_state dyna_sequence; do
		find "$repo" -name config.pbtxt -exec grep -lE "backend:[[:space:]]*\"$b\"" {} + 2>/dev/null |
			while read -r cfg; do
				sed -i -E "s/backend:[[:space:]]*\"$b\"/backend: \"python\"/" "$cfg"
				for v in $(find "$(dirname "$cfg")" -mindepth 1 -maxdepth 1 -type d -regex '.*/[0-9]+$'); do
					cp "$QA_HERE/standin/${b}_model.py" "$v/model.py"
				done
				echo "tritonserver.sh: $(dirname "$cfg"): Triton's $b backend stood in for by standin/${b}_model.py" >&2
			done
	done
done
exec "$SLUICE" model-server --server-name triton "${args[@]}"
