#!/usr/bin/env python3
"""clients_triton.py: drive a KServe v2 server with Triton's own Python client.

bench/clients.sh runs it once per tritonclient row. It reads a KServe v2 JSON
request body (the inputs' names, datatypes, shapes and data), builds the same
request with tritonclient.http or tritonclient.grpc, and sends it until
REQUESTS have answered. With
--compression gzip it turns on the client's own compression options:
request_compression_algorithm and response_compression_algorithm over HTTP,
compression_algorithm over gRPC. Every answer's outputs are checked against
the first answer's. The HTTP client sends one request at a time (as a Python
service calling infer() does); the gRPC client keeps CONCURRENCY in flight
with async_infer.

It prints a summary in hey's words (so clients.sh reads both the same way):
"Requests/sec:", " 50% in S secs", " 99% in S secs" and "[200] N responses"
(N: the answers that came back without an error).
"""

import argparse
import json
import sys
import threading
import time

import numpy as np

DTYPES = {"FP32": np.float32, "FP64": np.float64, "INT32": np.int32, "INT64": np.int64}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--protocol", choices=["http", "grpc"], required=True)
    ap.add_argument("--compression", choices=["none", "gzip"], default="none")
    ap.add_argument("--url", required=True, help="HOST:PORT")
    ap.add_argument("--model", required=True)
    ap.add_argument("--body", required=True, help="KServe v2 JSON request file")
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--concurrency", type=int, default=32)
    a = ap.parse_args()

    if a.protocol == "http":
        import tritonclient.http as tc
        client = tc.InferenceServerClient(a.url, concurrency=a.concurrency)
    else:
        import tritonclient.grpc as tc
        client = tc.InferenceServerClient(a.url)

    with open(a.body) as f:
        body = json.load(f)
    inputs = []
    for spec in body["inputs"]:
        arr = np.array(spec["data"], dtype=DTYPES[spec["datatype"]]).reshape(spec["shape"])
        inp = tc.InferInput(spec["name"], list(arr.shape), spec["datatype"])
        if a.protocol == "http":
            inp.set_data_from_numpy(arr, binary_data=False)
        else:
            inp.set_data_from_numpy(arr)
        inputs.append(inp)

    gz = a.compression == "gzip"
    lock = threading.Lock()
    done = threading.Semaphore(0)
    slots = threading.Semaphore(a.concurrency)
    lat, errors, ok = [], [], [0]
    reference = {}

    def check(result):
        outs = result.get_response()["outputs"] if a.protocol == "http" else result.get_response().outputs
        names = [o["name"] if a.protocol == "http" else o.name for o in outs]
        got = {n: result.as_numpy(n) for n in names}
        with lock:
            if not reference:
                reference.update(got)
            elif any(not np.array_equal(reference[n], got[n]) for n in names):
                raise ValueError("answer differs from the first one")

    def finish(started, result, error):
        try:
            if error is None:
                check(result)
        except Exception as e:  # a wrong answer counts as an error
            error = e
        with lock:
            lat.append(time.perf_counter() - started)
            if error is None:
                ok[0] += 1
            elif len(errors) < 5:
                errors.append(str(error))
        slots.release()
        done.release()

    t0 = time.perf_counter()
    if a.protocol == "http":
        # One request at a time, as a Python service calls infer(): the
        # client's own asynchronous mode runs on gevent greenlets and, driven
        # from a window on this thread, measured slower than this loop.
        kw = {"request_compression_algorithm": "gzip", "response_compression_algorithm": "gzip"} if gz else {}
        for _ in range(a.requests):
            slots.acquire()
            started = time.perf_counter()
            try:
                finish(started, client.infer(a.model, inputs, **kw), None)
            except Exception as e:
                finish(started, None, e)
    else:
        kw = {"compression_algorithm": "gzip"} if gz else {}
        for _ in range(a.requests):
            slots.acquire()
            started = time.perf_counter()
            # tritonclient.grpc calls back with keywords: result=, error=.
            client.async_infer(a.model, inputs, callback=lambda result, error, s=started: finish(s, result, error), **kw)
    for _ in range(a.requests):
        done.acquire()
    elapsed = time.perf_counter() - t0
    lat.sort()
    print(f"Requests/sec:\t{a.requests / elapsed:.1f}")
    print(f"  50% in {lat[len(lat) // 2]:.4f} secs")
    print(f"  99% in {lat[min(len(lat) - 1, int(len(lat) * 0.99))]:.4f} secs")
    print(f"  [200]\t{ok[0]} responses")
    for e in errors:
        print("error:", e, file=sys.stderr)
    return 0 if ok[0] == a.requests else 1


if __name__ == "__main__":
    sys.exit(main())
