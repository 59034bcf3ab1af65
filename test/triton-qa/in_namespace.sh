#!/bin/bash
# Runs inside run.sh's private network and mount namespaces: lays out the
# paths Triton's test.sh scripts hard-code, then runs one directory's
# test.sh unchanged.
set -eu
dir=$1
ip link set lo up
mount -t tmpfs qa-opt /opt
mkdir -p /opt/tritonserver/bin /opt/tritonserver/lib /opt/tritonserver/backends /opt/tritonserver/qa
mount --bind "$QA_RUN/qa" /opt/tritonserver/qa
cp "$QA_HERE/tritonserver.sh" /opt/tritonserver/bin/tritonserver
mount -t tmpfs qa-data /data
mkdir -p /data/inferenceserver/qa
mount --bind "$QA_DATA" /data/inferenceserver/qa
# python and python3 for the scripts: the interpreter with Debian's
# packages, recording what each run prints; pip: pip.sh.
mkdir -p "$QA_RUN/bin"
for n in python python3; do
	printf '#!/bin/bash\nexec "%s" "%s" "$@"\n' "$PYTHON" "$QA_HERE/record.py" >"$QA_RUN/bin/$n"
	chmod +x "$QA_RUN/bin/$n"
done
for n in pip pip3; do
	cp "$QA_HERE/pip.sh" "$QA_RUN/bin/$n"
done
export PATH=$QA_RUN/bin:$PATH
export PYTHONPATH=$QA_PYLIB:$QA_HERE/shim${PYTHONPATH:+:$PYTHONPATH}
export NVIDIA_TRITON_SERVER_VERSION=qa
# Triton's image sets TRITON_SERVER_VERSION to the server's version, which
# some tests compare with the server metadata: here, Sluice's version.
TRITON_SERVER_VERSION=$("$SLUICE" version | awk 'NR == 1 { print $2 }')
export TRITON_SERVER_VERSION
export TRITON_SERVER_CPU_ONLY=1
# Some scripts test `[ $TEST_WINDOWS -eq 0 ]` without a default (L0_batcher's
# preserve_ordering part): Triton's Linux CI sets it to 0.
export TEST_WINDOWS=${TEST_WINDOWS:-0}
export QA_RECORDS=$QA_RUN/records
cd "/opt/tritonserver/qa/$dir"
exec bash test.sh
