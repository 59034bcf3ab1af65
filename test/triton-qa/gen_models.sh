#!/bin/sh
# Makes the ONNX model repositories Triton's L0 tests copy from their
# DATADIR, with Triton's own generators (qa/common/gen_qa_*.py) and the
# arguments Triton's qa/common/gen_qa_model_repository passes them.
#
# usage: gen_models.sh SERVER_CHECKOUT DATADIR
set -eu
server=$1 data=$2
py=${PYTHON:-/usr/bin/python3}
export PYTHONPATH="$(cd "$(dirname "$0")" && pwd)/shim${PYTHONPATH:+:$PYTHONPATH}"
gen=$server/qa/common
mkdir -p "$data"
cd "$gen"
run() {
	dir=$1
	shift
	if [ -d "$data/$dir" ]; then
		echo "have $dir"
		return
	fi
	echo "generating $dir: $*"
	mkdir -p "$data/$dir.tmp"
	"$py" "$@" --models_dir="$data/$dir.tmp" >"$data/$dir.log" 2>&1 || {
		echo "generator failed for $dir (see $data/$dir.log)"
		rm -rf "$data/$dir.tmp"
		return
	}
	mv "$data/$dir.tmp" "$data/$dir"
}
o=--onnx_opset=0
run qa_model_repository gen_qa_models.py --onnx $o
run qa_variable_model_repository gen_qa_models.py --onnx $o --variable
run qa_identity_model_repository gen_qa_identity_models.py --onnx $o
run qa_reshape_model_repository gen_qa_reshape_models.py --onnx $o --variable
run qa_sequence_model_repository gen_qa_sequence_models.py --onnx $o
run qa_variable_sequence_model_repository gen_qa_sequence_models.py --onnx $o --variable
run qa_sequence_initial_state_implicit_model_repository gen_qa_implicit_models.py --onnx --initial-state zero $o
run qa_variable_sequence_initial_state_implicit_model_repository gen_qa_implicit_models.py --onnx --initial-state zero $o --variable
run qa_sequence_implicit_model_repository gen_qa_implicit_models.py --onnx $o
run qa_variable_sequence_implicit_model_repository gen_qa_implicit_models.py --onnx $o --variable
run qa_dyna_sequence_model_repository gen_qa_dyna_sequence_models.py --onnx $o
run qa_dyna_sequence_implicit_model_repository gen_qa_dyna_sequence_implicit_models.py --onnx $o
run qa_ragged_model_repository gen_qa_ragged_models.py --onnx $o
run qa_scalar_models gen_qa_ort_scalar_models.py $o
mkdir -p "$data/qa_ensemble_model_repository"
run qa_ensemble_model_repository/qa_model_repository gen_qa_models.py --ensemble
run qa_ensemble_model_repository/qa_variable_model_repository gen_qa_models.py --ensemble --variable
run qa_ensemble_model_repository/qa_reshape_model_repository gen_qa_reshape_models.py --ensemble
run qa_ensemble_model_repository/qa_identity_model_repository gen_qa_identity_models.py --ensemble
run qa_ensemble_model_repository/qa_sequence_model_repository gen_qa_sequence_models.py --ensemble
run qa_ensemble_model_repository/qa_variable_sequence_model_repository gen_qa_sequence_models.py --ensemble --variable
