#!/bin/sh
# Builds Triton's Python client (tritonclient: HTTP, gRPC, system shared
# memory) from a checkout of Triton's client repository into a directory
# for PYTHONPATH, without the package index: the pure-Python sources are
# copied and the gRPC modules are generated from the common repository's
# .proto files (protoc for the messages, grpc_tools for the service stub).
#
# usage: build_client.sh CLIENT_CHECKOUT COMMON_CHECKOUT OUT_DIR
set -eu
client=$1 common=$2 out=$3
py=${PYTHON:-/usr/bin/python3}
lib=$client/src/python/library
rm -rf "$out"
mkdir -p "$out"
cp -r "$lib/tritonclient" "$out/tritonclient"
# The deprecated top-level packages Triton's wheel also ships
# (tritonhttpclient, tritongrpcclient, ...), which some QA tests import
# (L0_simple_ensemble's ensemble_test.py).
for p in tritonclientutils tritonhttpclient tritongrpcclient tritonshmutils; do
	[ ! -d "$lib/$p" ] || cp -r "$lib/$p" "$out/$p"
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$common/protobuf/grpc_service.proto" "$common/protobuf/model_config.proto" "$tmp/"
protoc -I "$tmp" --python_out="$tmp" "$tmp/grpc_service.proto" "$tmp/model_config.proto"
"$py" -m grpc_tools.protoc -I "$tmp" --grpc_python_out="$tmp" "$tmp/grpc_service.proto"
g=$out/tritonclient/grpc
# The client imports the generated modules under these names (as Triton's
# wheel build lays them out).
sed 's/^import model_config_pb2 as /from tritonclient.grpc import model_config_pb2 as /' "$tmp/grpc_service_pb2.py" >"$g/service_pb2.py"
cp "$tmp/model_config_pb2.py" "$g/model_config_pb2.py"
sed 's/^import grpc_service_pb2 as /from tritonclient.grpc import service_pb2 as /' "$tmp/grpc_service_pb2_grpc.py" >"$g/service_pb2_grpc.py"
"$py" -c 'import sys; sys.path.insert(0, sys.argv[1]); import tritonclient.http, tritonclient.grpc, tritonclient.grpc.aio, tritonclient.http.aio, tritonclient.utils.shared_memory, tritonhttpclient, tritongrpcclient' "$out"
echo "tritonclient built in $out"
