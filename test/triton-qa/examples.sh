#!/bin/bash
# Runs Triton's python_backend examples unchanged against
# `sluice model-server --server-name triton`: for each example it lays out a
# model repository as the example's README says (its model.py and
# config.pbtxt copied and renamed as the README's `cp` lines do), starts
# Sluice on it in a private network namespace (the clients hard-code
# localhost:8000/8001/8002), runs the example's own client and prints one
# line: PASS or FAIL, with the client's last line (or why the layout failed).
#
# usage: examples.sh [example ...]     (default: all of them, in order below)
#   PYTHON_BACKEND_SRC       checkout of triton-inference-server/python_backend (required)
#   TRITONCLIENT_PYTHONPATH  directory holding tritonclient (build_client.sh's OUT_DIR; required)
#   TRITON_SERVER_SRC        checkout of triton-inference-server/server: its
#                            qa/images/mug.jpg is preprocessing's image (optional)
#   SLUICE                   the sluice binary (default: bin/sluice of this tree)
#   PYTHON                   interpreter for the clients (default /usr/bin/python3)
#   EX_WORK                  work directory (default: a new temporary directory);
#                            EX_WORK/<example>/ keeps models/, server.log, client.log
#   EX_TIMEOUT               seconds one client may run (default 300)
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
all=(add_sub pytorch bls_sync bls_async decoupled_repeat decoupled_square custom_metrics
	bls_decoupled_sync bls_decoupled_async auto_complete preprocessing)

# models EXAMPLE: the README's layout, into ./models (the current directory
# is a copy of the checkout's examples/.., so the README's paths hold).
models() {
	local m=models
	case $1 in
	add_sub)
		mkdir -p $m/add_sub/1
		cp examples/add_sub/model.py $m/add_sub/1/model.py
		cp examples/add_sub/config.pbtxt $m/add_sub/config.pbtxt ;;
	pytorch)
		mkdir -p $m/pytorch/1
		cp examples/pytorch/model.py $m/pytorch/1/
		cp examples/pytorch/config.pbtxt $m/pytorch/ ;;
	bls_sync | bls_async)
		local k=${1#bls_}
		mkdir -p $m/add_sub/1 $m/bls_$k/1 $m/pytorch/1
		cp examples/add_sub/model.py $m/add_sub/1/
		cp examples/add_sub/config.pbtxt $m/add_sub/config.pbtxt
		cp examples/bls/${k}_model.py $m/bls_$k/1/model.py
		cp examples/bls/${k}_config.pbtxt $m/bls_$k/config.pbtxt
		cp examples/pytorch/model.py $m/pytorch/1/
		cp examples/pytorch/config.pbtxt $m/pytorch/ ;;
	decoupled_repeat | decoupled_square)
		mkdir -p $m/repeat_int32/1 $m/square_int32/1
		cp examples/decoupled/repeat_model.py $m/repeat_int32/1/model.py
		cp examples/decoupled/repeat_config.pbtxt $m/repeat_int32/config.pbtxt
		cp examples/decoupled/square_model.py $m/square_int32/1/model.py
		cp examples/decoupled/square_config.pbtxt $m/square_int32/config.pbtxt ;;
	custom_metrics)
		mkdir -p $m/custom_metrics/1
		cp examples/custom_metrics/model.py $m/custom_metrics/1/model.py
		cp examples/custom_metrics/config.pbtxt $m/custom_metrics/config.pbtxt ;;
	bls_decoupled_sync | bls_decoupled_async)
		local k=${1#bls_decoupled_}
		mkdir -p $m/bls_decoupled_$k/1 $m/square_int32/1
		cp examples/bls_decoupled/${k}_model.py $m/bls_decoupled_$k/1/model.py
		cp examples/bls_decoupled/${k}_config.pbtxt $m/bls_decoupled_$k/config.pbtxt
		cp examples/decoupled/square_model.py $m/square_int32/1/model.py
		cp examples/decoupled/square_config.pbtxt $m/square_int32/config.pbtxt ;;
	auto_complete)
		mkdir -p $m/nobatch_auto_complete/1 $m/batch_auto_complete/1
		cp examples/auto_complete/nobatch_model.py $m/nobatch_auto_complete/1/model.py
		cp examples/auto_complete/batch_model.py $m/batch_auto_complete/1/model.py ;;
	preprocessing)
		# The README's step 2 runs in examples/preprocessing, whose
		# model_repository already holds the three configs.
		(cd examples/preprocessing && mkdir -p model_repository/ensemble_python_resnet50/1 \
			model_repository/preprocess/1 model_repository/resnet50_trt/1 &&
			cp model.py model_repository/preprocess/1) || return 1
		preprocessing_resnet || return 1
		ln -s examples/preprocessing/model_repository $m ;;
	*) return 2 ;;
	esac
}

# The README's resnet50_trt is a TensorRT engine (trtexec, GPU) built from
# the ResNet50 that onnx_exporter.py exports with torchvision's pretrained
# weights, which it downloads. Neither is available here, so the step is
# stood in for: the same torchvision ResNet50 with untrained weights,
# exported with onnx_exporter.py's arguments, under ONNX Runtime (its
# config's platform edited, nothing else). The ensemble, the preprocess
# model and the client run unchanged; the class it prints is meaningless.
preprocessing_resnet() {
	local d=examples/preprocessing/model_repository/resnet50_trt
	"$PYTHON" -c 'import torchvision, PIL' 2>/dev/null || {
		echo "preprocess/model.py needs torchvision and PIL (python3-torchvision python3-pil)"
		return 1
	}
	"$PYTHON" - "$d/1/model.onnx" <<-'EOF' || return 1
		import sys, torch, torchvision
		torch.manual_seed(0)
		m = torchvision.models.resnet50(weights=None).eval()
		torch.onnx.export(m, torch.randn(1, 3, 224, 224), sys.argv[1], export_params=True,
		    opset_version=10, do_constant_folding=True, input_names=["input"], output_names=["output"],
		    dynamic_axes={"input": {0: "batch_size", 2: "height", 3: "width"}, "output": {0: "batch_size"}})
	EOF
	sed -i 's/platform: "tensorrt_plan"/platform: "onnxruntime_onnx"/' "$d/config.pbtxt"
}

# client EXAMPLE: the README's client command, from the README's directory.
client() {
	case $1 in
	add_sub | pytorch | custom_metrics | auto_complete) "$PYTHON" examples/$1/client.py ;;
	bls_sync | bls_async) "$PYTHON" examples/bls/${1#bls_}_client.py ;;
	decoupled_repeat | decoupled_square) "$PYTHON" examples/decoupled/${1#decoupled_}_client.py ;;
	bls_decoupled_sync | bls_decoupled_async) "$PYTHON" examples/bls_decoupled/${1#bls_decoupled_}_client.py ;;
	preprocessing)
		[ -n "${TRITON_SERVER_SRC:-}" ] || { echo "TRITON_SERVER_SRC not set: no qa/images/mug.jpg"; return 1; }
		cp "$TRITON_SERVER_SRC/qa/images/mug.jpg" examples/preprocessing/mug.jpg
		(cd examples/preprocessing && "$PYTHON" client.py --image mug.jpg) || return 1
		# The printed class is meaningless (untrained weights): check
		# instead that the ensemble's output is the stand-in ResNet50 (torch,
		# same seed) on what the preprocess model answers for the image.
		"$PYTHON" - examples/preprocessing/mug.jpg <<-'EOF'
			import sys, numpy as np, torch, torchvision, tritonclient.grpc as g
			c = g.InferenceServerClient("localhost:8001")
			def infer(model, inp, out):
			    i = g.InferInput(inp, [1, len(img)], "UINT8"); i.set_data_from_numpy(img[None])
			    return c.infer(model, [i], outputs=[g.InferRequestedOutput(out)]).as_numpy(out)
			img = np.fromfile(sys.argv[1], dtype="uint8")
			pre = infer("preprocess", "INPUT_0", "OUTPUT_0")
			got = infer("ensemble_python_resnet50", "INPUT", "OUTPUT")
			torch.manual_seed(0)
			m = torchvision.models.resnet50(weights=None).eval()
			with torch.no_grad():
			    want = m(torch.from_numpy(pre.copy())).numpy()
			d = float(np.abs(got - want).max())
			assert pre.shape == (1, 3, 224, 224) and got.shape == (1, 1000), (pre.shape, got.shape)
			assert np.allclose(got, want, rtol=1e-3, atol=1e-3), d
			print("PASS: ensemble output = torch ResNet50 of the preprocess output (max abs diff %.2g)" % d)
		EOF
		;;
	esac
}

# Inside the namespace: one example, from its directory.
if [ "${1:-}" = --in-namespace ]; then
	ex=$2
	ip link set lo up
	"$SLUICE" model-server --server-name triton --model-repository "$PWD/models" >server.log 2>&1 &
	server=$!
	ready=0
	for _ in $(seq 600); do
		kill -0 $server 2>/dev/null || break
		if "$PYTHON" -c 'import sys, urllib.request as u; sys.exit(u.urlopen("http://localhost:8000/v2/health/ready", timeout=2).status != 200)' 2>/dev/null; then
			ready=1
			break
		fi
		sleep 0.5
	done
	if [ $ready = 1 ]; then
		PYTHONPATH=$EX_CLIENT_PYTHONPATH timeout -k 10 "${EX_TIMEOUT:-300}" \
			bash -c "$(declare -f client); client $ex" >client.log 2>&1
		rc=$?
	else
		echo "server did not become ready (server.log)" >client.log
		rc=3
	fi
	kill $server 2>/dev/null
	wait $server 2>/dev/null
	exit $rc
fi

: "${PYTHON_BACKEND_SRC:?set PYTHON_BACKEND_SRC to a checkout of triton-inference-server/python_backend}"
: "${TRITONCLIENT_PYTHONPATH:?set TRITONCLIENT_PYTHONPATH to the output directory of build_client.sh}"
export SLUICE=${SLUICE:-$root/bin/sluice} PYTHON=${PYTHON:-/usr/bin/python3}
# tritonclient is the clients' alone (the server's workers do not get it).
export EX_CLIENT_PYTHONPATH=$TRITONCLIENT_PYTHONPATH${PYTHONPATH:+:$PYTHONPATH}
[ "$(id -u)" = 0 ] || { echo "examples.sh needs root for unshare -n" >&2; exit 2; }
[ -x "$SLUICE" ] || { echo "no sluice binary at $SLUICE (make build)" >&2; exit 2; }
work=${EX_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/sluice-pyex.XXXXXX")}
list=("$@")
[ ${#list[@]} -gt 0 ] || list=("${all[@]}")
failed=0
for ex in "${list[@]}"; do
	d=$work/$ex
	rm -rf "$d"
	mkdir -p "$d"
	cp -r "$PYTHON_BACKEND_SRC/examples" "$d/examples"
	start=$(date +%s)
	if ! (cd "$d" && models "$ex") >"$d/setup.log" 2>&1; then
		failed=$((failed + 1))
		printf '%-22s FAIL  model layout: %s\n' "$ex" "$(tail -n1 "$d/setup.log")"
		continue
	fi
	(cd "$d" && unshare -n "$here/examples.sh" --in-namespace "$ex")
	rc=$?
	secs=$(($(date +%s) - start))
	if [ $rc = 0 ]; then
		printf '%-22s PASS  %ds  %s\n' "$ex" "$secs" "$( (grep '^PASS' "$d/client.log" || grep -v '^$' "$d/client.log") | tail -n1)"
	else
		failed=$((failed + 1))
		printf '%-22s FAIL  rc=%d %ds  %s\n' "$ex" "$rc" "$secs" "$(grep -v '^$' "$d/client.log" | tail -n1)"
	fi
done
echo "logs: $work/<example>/{setup,server,client}.log"
[ $failed = 0 ]
