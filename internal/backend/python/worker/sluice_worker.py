"""Sluice's Python worker: runs one model instance for Sluice's python and
pytorch backends.

Sluice starts it with a connected Unix stream socket as file descriptor
SLUICE_WORKER_FD and speaks a binary framing over it (described in the Go
package internal/backend/python, frame.go). The first frame is INIT with
the model to load and Triton's initialize() arguments; the worker answers
READY or ERROR. Then it answers EXECUTE frames (a batch of requests, one
execute() call) with RESULT or ERROR, PING with PONG, and FINALIZE by
calling finalize() and exiting. It exits too when the socket closes.

The worker is single-threaded: one call at a time, in arrival order.
"""

import asyncio
import importlib
import importlib.util
import inspect
import json
import os
import queue
import socket
import struct
import sys
import threading
import traceback

OP_INIT = 1
OP_READY = 2
OP_EXECUTE = 3
OP_RESULT = 4
OP_ERROR = 5
OP_PING = 6
OP_PONG = 7
OP_FINALIZE = 8
OP_FINALIZED = 9
OP_LOG = 10
OP_RESPONSE = 11
OP_BLS = 12
OP_BLS_RESULT = 13
OP_METRIC = 14
OP_BLS_STREAM = 15

PROTOCOL = 4

HEADER = struct.Struct("<IBxxxQ")
U16 = struct.Struct("<H")
U32 = struct.Struct("<I")
U32x3 = struct.Struct("<III")
U64 = struct.Struct("<Q")
TENSOR_HEAD = struct.Struct("<BB")

BYTES = 13

# Data at most this large is copied into the frame being built; larger
# arrays are sent from their own memory.
INLINE_LIMIT = 64 << 10

# Triton error codes to the wire (TritonError.code() None -> 0).
KNOWN_CODES = range(1, 9)
CODE_INTERNAL = 2


class Conn:
    """One end of the framing."""

    def __init__(self, sock):
        self.sock = sock
        self.hdr = bytearray(HEADER.size)
        # Decoupled models send responses from their own threads.
        self.wlock = threading.Lock()

    def _recv_into(self, mv):
        while len(mv):
            n = self.sock.recv_into(mv)
            if n == 0:
                raise EOFError
            mv = mv[n:]

    def read(self):
        """Returns (op, id, frame) with the whole frame in a new bytearray;
        payload offsets start at HEADER.size."""
        self._recv_into(memoryview(self.hdr))
        size, op, rid = HEADER.unpack_from(self.hdr)
        buf = bytearray(size)
        buf[: HEADER.size] = self.hdr
        self._recv_into(memoryview(buf)[HEADER.size :])
        return op, rid, buf

    def send(self, op, rid, payload=b""):
        with self.wlock:
            self.sock.sendall(HEADER.pack(HEADER.size + len(payload), op, rid) + payload)

    def send_json(self, op, rid, obj):
        self.send(op, rid, json.dumps(obj).encode("utf-8"))

    def send_chunks(self, chunks, size, rid, op=OP_RESULT):
        """chunks[0] starts with a header placeholder."""
        HEADER.pack_into(chunks[0], 0, size, op, rid)
        with self.wlock:
            for c in chunks:
                self.sock.sendall(c)


def where(tb_exc, files):
    """file:line of the innermost traceback frame in one of files, or of
    the innermost frame outside this worker."""
    frames = tb_exc.stack
    for fr in reversed(frames):
        if fr.filename in files:
            return "%s:%d" % (fr.filename, fr.lineno)
    here = os.path.dirname(os.path.abspath(__file__))
    for fr in reversed(frames):
        if not fr.filename.startswith(here) and not fr.filename.startswith("<"):
            return "%s:%d" % (fr.filename, fr.lineno)
    return ""


def error_info(what, exc, files):
    tb = traceback.TracebackException.from_exception(exc)
    if isinstance(exc, SyntaxError):
        # The offending line is in the exception, not in the traceback.
        loc = "%s:%s" % (exc.filename, exc.lineno) if exc.filename else ""
        msg = "%s: %s" % (type(exc).__name__, exc.msg)
    else:
        loc = where(tb, files)
        msg = "".join(tb.format_exception_only()).strip()
    text = "%s: %s" % (what, msg)
    if loc:
        text = "%s (%s)" % (text, loc)
    return {"message": text, "traceback": "".join(tb.format())}


class Worker:
    def __init__(self, conn):
        self.conn = conn
        self.model = None
        self.np = None
        self.pb = None
        self.files = set()
        self.loop = None
        self.dtypes = {}
        self.itemsizes = {}
        self.decoupled = False
        # Frames for the main loop, from the reader thread; BLS answers go
        # to their waiters instead.
        self.frames = queue.SimpleQueue()
        self.bls_lock = threading.Lock()
        self.bls_next = 0
        self.bls_waiting = {}  # id -> [threading.Event, frame]
        self.bls_streams = {}  # id -> queue.Queue of a decoupled BLS request's frames (None once the connection closed)

    # --- start-up -------------------------------------------------------

    def init(self, rid, buf):
        spec = json.loads(bytes(buf[HEADER.size :]).decode("utf-8"))
        try:
            import numpy as np  # noqa: PLC0415 - after the socket is up, so a missing numpy is reported
        except ImportError:
            self.conn.send_json(OP_ERROR, rid, {
                "message": "numpy is not installed for %s: install the Debian package python3-numpy "
                "(scripts/setup.sh does when run as root)" % sys.executable,
            })
            return False
        self.np = np
        here = os.path.dirname(os.path.abspath(__file__))
        if here not in sys.path:
            sys.path.insert(0, here)
        import triton_python_backend_utils as pb  # noqa: PLC0415

        self.pb = pb
        pb._log_sink = self.log
        pb._bls_exec = self.bls_exec
        pb._metric_sink = lambda msg: self.conn.send_json(OP_METRIC, 0, msg)
        for code, t in pb._CODE_TO_NUMPY.items():
            if t is not np.object_:
                self.dtypes[code] = np.dtype(t).newbyteorder("<")
                self.itemsizes[code] = self.dtypes[code].itemsize

        args = spec["args"]
        vdir = os.path.join(args["model_repository"], args["model_version"])
        if vdir not in sys.path:
            sys.path.insert(0, vdir)
        try:
            cfg = json.loads(args["model_config"])
            self.decoupled = bool(pb.using_decoupled_model_transaction_policy(cfg))
            if spec.get("builtin"):
                module = importlib.import_module(spec["builtin"])
                self.files.add(getattr(module, "__file__", "") or "")
            else:
                path = spec["model_file"]
                self.files.add(path)
                mspec = importlib.util.spec_from_file_location("model", path)
                if mspec is None or mspec.loader is None:
                    raise ImportError("cannot load %s as a Python module" % path)
                module = importlib.util.module_from_spec(mspec)
                sys.modules["model"] = module
                mspec.loader.exec_module(module)
            cls = getattr(module, "TritonPythonModel", None)
            if cls is None:
                raise pb.TritonModelException("%s defines no class TritonPythonModel" % (spec.get("model_file") or spec.get("builtin")))
            if not callable(getattr(cls, "execute", None)):
                raise pb.TritonModelException("class TritonPythonModel has no execute method")
            self.model = cls()
            init = getattr(self.model, "initialize", None)
            if init is not None:
                self.await_(init(args))
        except BaseException as e:  # noqa: BLE001 - everything a model does wrong is reported
            self.conn.send_json(OP_ERROR, rid, error_info("load model", e, self.files))
            return False
        self.conn.send_json(OP_READY, rid, {
            "protocol": PROTOCOL,
            "pid": os.getpid(),
            "python": sys.version.split()[0],
            "numpy": np.__version__,
        })
        return True

    def await_(self, result):
        if type(result) is not list and inspect.isawaitable(result):
            if self.loop is None:
                self.loop = asyncio.new_event_loop()
            return self.loop.run_until_complete(result)
        return result

    def log(self, level, msg):
        try:
            self.conn.send_json(OP_LOG, 0, {"level": level, "msg": msg})
        except OSError:
            pass

    # --- execute --------------------------------------------------------

    def decode_requests(self, rid, buf):
        received = self.pb.InferenceRequest._received
        off = HEADER.size
        (n,) = U32.unpack_from(buf, off)
        off += 4
        reqs = []
        for _ in range(n):
            nin, nout, nparams = U32x3.unpack_from(buf, off)
            off += 12
            params = "{}"
            if nparams:
                params = str(buf[off : off + nparams], "utf-8")
                off += nparams
            outs = []
            for _ in range(nout):
                (ln,) = U16.unpack_from(buf, off)
                off += 2
                outs.append(str(buf[off : off + ln], "utf-8"))
                off += ln
            ins = []
            for _ in range(nin):
                t, off = self.decode_tensor(buf, off)
                ins.append(t)
            sender = None
            if self.decoupled:
                sender = self.pb.InferenceResponseSender(self.stream_sender(rid, len(reqs)))
            reqs.append(received(ins, outs, params, sender))
        return reqs

    def stream_sender(self, rid, index):
        def send(response, flags):
            self.send_streamed(rid, index, response, flags)
        return send

    def execute(self, rid, buf):
        try:
            requests = self.decode_requests(rid, buf)
        except Exception as e:  # noqa: BLE001
            self.conn.send_json(OP_ERROR, rid, error_info("decode requests", e, self.files))
            return
        try:
            responses = self.await_(self.model.execute(requests))
        except BaseException as e:  # noqa: BLE001 - reported for the whole batch
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            self.conn.send_json(OP_ERROR, rid, error_info("execute", e, self.files))
            return
        if self.decoupled:
            if responses is not None:
                self.conn.send_json(OP_ERROR, rid, {"message": "execute of a decoupled model must return None, got %s: send responses with request.get_response_sender()" % type(responses).__name__})
                return
            self.send_result(rid, [])
            return
        if responses is None:
            self.conn.send_json(OP_ERROR, rid, {"message": "execute returned None: return one InferenceResponse per request (only a decoupled model, model_transaction_policy { decoupled: true }, sends responses with get_response_sender())"})
            return
        if not isinstance(responses, (list, tuple)) or len(responses) != len(requests):
            got = "%d responses" % len(responses) if isinstance(responses, (list, tuple)) else type(responses).__name__
            self.conn.send_json(OP_ERROR, rid, {"message": "execute must return a list of %d InferenceResponse objects (one per request), got %s" % (len(requests), got)})
            return
        self.send_result(rid, responses)

    def send_result(self, rid, responses):
        chunks = []
        cur = bytearray(HEADER.size)
        size = HEADER.size
        cur += U32.pack(len(responses))
        size += 4
        for resp in responses:
            cur, size = self.append_response(chunks, cur, size, resp)
        chunks.append(cur)
        self.conn.send_chunks(chunks, size, rid)

    def send_streamed(self, rid, index, response, flags):
        """One OP_RESPONSE frame: request index, flags, and the response
        (or none: the final flag alone)."""
        chunks = []
        cur = bytearray(HEADER.size)
        cur += U32.pack(index) + bytes((flags & 1, 0 if response is None else 1))
        size = HEADER.size + 6
        if response is not None:
            cur, size = self.append_response(chunks, cur, size, response)
        chunks.append(cur)
        self.conn.send_chunks(chunks, size, rid, OP_RESPONSE)

    def append_response(self, chunks, cur, size, resp):
        """Appends one response's encoding; returns the buffer being built
        and the frame size so far."""
        body, err = self.encode_response(resp)
        if err is not None:
            code, msg = err
            data = msg.encode("utf-8", "replace")
            cur += bytes((1, code)) + U32.pack(len(data)) + data
            return cur, size + 6 + len(data)
        cur.append(0)
        cur += U32.pack(len(body))
        size += 5
        for enc in body:
            cur, size = self.append_encoded(chunks, cur, size, enc)
        return cur, size

    def append_encoded(self, chunks, cur, size, enc):
        """Appends one encoded tensor (name, code, shape, memoryview)."""
        name, code, shape, data = enc
        nb = name.encode("utf-8")
        cur += U16.pack(len(nb)) + nb + TENSOR_HEAD.pack(code, len(shape))
        size += 4 + len(nb)
        pad = (-size) % 8
        cur += bytes(pad)
        size += pad
        cur += struct.pack("<%dq" % len(shape), *shape)
        cur += U64.pack(data.nbytes)
        size += 8 * len(shape) + 8
        if data.nbytes <= INLINE_LIMIT:
            cur += data
        else:
            chunks.append(cur)
            chunks.append(data)
            cur = bytearray()
        return cur, size + data.nbytes

    def encode_tensor(self, t, kind):
        """((name, code, shape, memoryview), None) or (None, message)."""
        np = self.np
        pb = self.pb
        if not isinstance(t, pb.Tensor):
            return None, "%s holds %s where a Tensor was expected" % (kind, type(t).__name__)
        arr = t.as_numpy()
        code = t.triton_dtype()
        if code == BYTES or arr.dtype.kind in "OSU":
            flat = pb.serialize_byte_tensor(arr)
            if flat is None:
                return None, "%s '%s': a %s array cannot be sent as BYTES" % (kind, t.name(), arr.dtype)
            return (t.name(), BYTES, arr.shape, memoryview(flat)), None
        dt = self.dtypes.get(code)
        if dt is None:
            return None, "%s '%s': numpy dtype %s is not supported" % (kind, t.name(), arr.dtype)
        if arr.dtype != dt or not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr, dtype=dt)
        return (t.name(), code, arr.shape, memoryview(arr.reshape(-1).view(np.uint8))), None

    def encode_response(self, resp):
        """([(name, code, shape, memoryview)], None) or (None, (code, message))."""
        if not hasattr(resp, "output_tensors") or not hasattr(resp, "has_error"):
            return None, (CODE_INTERNAL, "execute returned %s where an InferenceResponse was expected" % type(resp).__name__)
        if resp.has_error():
            err = resp.error()
            code = err.code() if hasattr(err, "code") else None
            msg = err.message() if hasattr(err, "message") else str(err)
            return None, (code if code in KNOWN_CODES else 0, "" if msg is None else str(msg))
        out = []
        for t in resp.output_tensors():
            enc, err = self.encode_tensor(t, "output")
            if err is not None:
                return None, (CODE_INTERNAL, err)
            out.append(enc)
        return out, None

    # --- the loop -------------------------------------------------------

    def finalize(self, rid):
        fin = getattr(self.model, "finalize", None)
        try:
            if fin is not None:
                self.await_(fin())
        except BaseException as e:  # noqa: BLE001
            self.conn.send_json(OP_FINALIZED, rid, error_info("finalize", e, self.files))
            return
        self.conn.send(OP_FINALIZED, rid)

    def read_frames(self):
        """The reader thread: hands BLS answers to their waiters and every
        other frame to the main loop; None when the socket closes."""
        try:
            while True:
                op, rid, buf = self.conn.read()
                if op == OP_BLS_RESULT:
                    with self.bls_lock:
                        slot = self.bls_waiting.pop(rid, None)
                        stream = self.bls_streams.pop(rid, None)
                    if slot is not None:
                        slot[1] = buf
                        slot[0].set()
                    if stream is not None:
                        # A request Sluice could not read answers as a
                        # plain one: its response is the final one.
                        stream.put(buf[: HEADER.size] + b"\x01" + buf[HEADER.size :])
                    continue
                if op == OP_BLS_STREAM:
                    with self.bls_lock:
                        stream = self.bls_streams.get(rid)
                        if stream is not None and buf[HEADER.size]:
                            del self.bls_streams[rid]
                    if stream is not None:
                        stream.put(buf)
                    continue
                self.frames.put((op, rid, buf))
        except (EOFError, OSError):
            pass
        self.frames.put(None)
        with self.bls_lock:
            waiting = list(self.bls_waiting.values())
            self.bls_waiting.clear()
            streams = list(self.bls_streams.values())
            self.bls_streams.clear()
        for slot in waiting:
            slot[0].set()
        for stream in streams:
            stream.put(None)

    # --- BLS ------------------------------------------------------------

    def bls_exec(self, request, decoupled=False):
        """Sends a BLS request to Sluice and waits for its response; any
        thread may call it. decoupled: returns an iterator over the
        request's responses, which yields each as Sluice sends it (the
        final flag alone comes as a response without outputs)."""
        pb = self.pb
        header = {
            "model_name": request._model_name,
            "model_version": int(request._model_version),
            "requested_output_names": list(request._outputs),
            "request_id": request._request_id,
            "correlation_id": request._correlation_id,
            "priority": int(request._priority),
            "timeout": int(request._timeout),
            "parameters": json.loads(request._parameters or "{}"),
            "decoupled": bool(decoupled),
        }
        js = json.dumps(header).encode("utf-8")
        chunks = []
        cur = bytearray(HEADER.size)
        cur += U32.pack(len(js)) + js
        size = HEADER.size + 4 + len(js)
        pad = (-size) % 8
        cur += bytes(pad)
        size += pad
        inputs = list(request._inputs)
        cur += U32.pack(len(inputs))
        size += 4
        for t in inputs:
            enc, err = self.encode_tensor(t, "input")
            if err is not None:
                raise pb.TritonModelException("InferenceRequest to model '%s': %s" % (request._model_name, err))
            cur, size = self.append_encoded(chunks, cur, size, enc)
        chunks.append(cur)
        if decoupled:
            stream = queue.Queue()
            with self.bls_lock:
                self.bls_next += 1
                rid = self.bls_next
                self.bls_streams[rid] = stream
            self.conn.send_chunks(chunks, size, rid, OP_BLS)
            return self.bls_responses(request._model_name, stream)
        slot = [threading.Event(), None]
        with self.bls_lock:
            self.bls_next += 1
            rid = self.bls_next
            self.bls_waiting[rid] = slot
        self.conn.send_chunks(chunks, size, rid, OP_BLS)
        slot[0].wait()
        if slot[1] is None:
            raise pb.TritonModelException("BLS request to model '%s': the connection to Sluice closed" % request._model_name)
        return self.decode_bls_response(slot[1])

    def bls_responses(self, model, stream):
        """The responses of a decoupled BLS request, as its OP_BLS_STREAM
        frames (u8 final, then the response) arrive."""
        while True:
            buf = stream.get()
            if buf is None:
                raise self.pb.TritonModelException("BLS request to model '%s': the connection to Sluice closed" % model)
            yield self.decode_bls_response(buf, HEADER.size + 1)
            if buf[HEADER.size]:
                return

    def decode_bls_response(self, buf, off=HEADER.size):
        pb = self.pb
        status = buf[off]
        off += 1
        if status == 1:
            code = buf[off]
            (n,) = U32.unpack_from(buf, off + 1)
            msg = str(buf[off + 5 : off + 5 + n], "utf-8", "replace")
            return pb.InferenceResponse(error=pb.TritonError(msg, code if code in KNOWN_CODES else None))
        (count,) = U32.unpack_from(buf, off)
        off += 4
        outs = []
        for _ in range(count):
            t, off = self.decode_tensor(buf, off)
            outs.append(t)
        return pb.InferenceResponse(output_tensors=outs)

    def decode_tensor(self, buf, off):
        """One tensor at off (as in EXECUTE frames); returns it and the
        offset after it."""
        (ln,) = U16.unpack_from(buf, off)
        off += 2
        name = str(buf[off : off + ln], "utf-8")
        off += ln
        code, rank = TENSOR_HEAD.unpack_from(buf, off)
        off += 2
        off = (off + 7) & ~7
        dims = struct.unpack_from("<%dq" % rank, buf, off)
        off += 8 * rank
        (nbytes,) = U64.unpack_from(buf, off)
        off += 8
        if code == BYTES:
            arr = self.pb.deserialize_bytes_tensor(memoryview(buf)[off : off + nbytes]).reshape(dims)
        else:
            dt = self.dtypes.get(code)
            if dt is None:
                raise ValueError("tensor '%s': data type code %d is not supported" % (name, code))
            arr = self.np.frombuffer(buf, dtype=dt, count=nbytes // self.itemsizes[code], offset=off).reshape(dims)
        off += nbytes
        return self.pb.Tensor._wrap(name, arr, code), off

    def serve(self):
        op, rid, buf = self.conn.read()
        if op != OP_INIT:
            self.conn.send_json(OP_ERROR, rid, {"message": "expected INIT, got op %d" % op})
            return 1
        if not self.init(rid, buf):
            return 1
        threading.Thread(target=self.read_frames, name="sluice-reader", daemon=True).start()
        while True:
            item = self.frames.get()
            if item is None:
                raise EOFError
            op, rid, buf = item
            if op == OP_EXECUTE:
                self.execute(rid, buf)
            elif op == OP_PING:
                self.conn.send(OP_PONG, rid)
            elif op == OP_FINALIZE:
                self.finalize(rid)
                return 0
            else:
                self.conn.send_json(OP_ERROR, rid, {"message": "unknown op %d" % op})


def main():
    fd = int(os.environ.get("SLUICE_WORKER_FD", "3"))
    sock = socket.socket(fileno=fd)
    worker = Worker(Conn(sock))
    try:
        code = worker.serve()
    except (EOFError, ConnectionResetError, BrokenPipeError):
        # Sluice closed the socket: it stopped or gave up on this worker.
        code = 0
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: model libraries' atexit hooks and thread
    # joins must not keep an unloaded worker alive.
    os._exit(code)


if __name__ == "__main__":
    main()
