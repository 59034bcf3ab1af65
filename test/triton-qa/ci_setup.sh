#!/bin/sh
# Lays out, in one run's copy of Triton's qa tree, what Triton's CI image
# adds to it (the server repository's Dockerfile.QA) that a CPU-only
# machine can have: the example models from docs/examples/model_repository
# (ONNX and Python models) in the directories Dockerfile.QA copies them to,
# and the client repository's Python examples in qa/clients. Models whose
# files Triton's image downloads (densenet_onnx) are left out, and so are
# the C++ clients and test binaries.
#
# usage: ci_setup.sh SERVER_CHECKOUT CLIENT_CHECKOUT QA_TREE
set -eu
server=$1 client=$2 qa=$3
ex=$server/docs/examples/model_repository

# models DEST MODEL...: Dockerfile.QA's `cp -r docs/examples/model_repository/MODEL qa/DEST`.
models() {
	dest=$qa/$1
	shift
	mkdir -p "$dest"
	for m in "$@"; do
		if ! ls "$ex/$m"/[0-9]*/* >/dev/null 2>&1; then
			echo "ci_setup.sh: $m left out of $dest: Triton's image downloads its model file" >&2
			continue
		fi
		cp -r "$ex/$m" "$dest/"
	done
}
models L0_shared_memory/models simple
models L0_cuda_shared_memory/models simple
models L0_http/models simple simple_dyna_sequence simple_identity simple_sequence simple_string densenet_onnx
models L0_grpc/models simple simple_dyna_sequence simple_int8 simple_identity simple_sequence simple_string densenet_onnx
models L0_https/models simple
models L0_secure_grpc/models simple
models L0_data_compression/models simple
models L0_simple_example/models simple
# L0_simple_ensemble: the simple model's ONNX file as versions 1 and 2.
for v in 1 2; do
	mkdir -p "$qa/L0_simple_ensemble/models/simple/$v"
	cp "$ex/simple/1/model.onnx" "$qa/L0_simple_ensemble/models/simple/$v/"
done
# The client repository's Python examples (Dockerfile.QA: install/python/*.py).
mkdir -p "$qa/clients"
cp "$client"/src/python/examples/*.py "$qa/clients/"
