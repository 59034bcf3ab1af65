package python

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// workerSpec is everything needed to start one worker process.
type workerSpec struct {
	interpreter string
	dir         string   // the extracted worker files
	args        []string // after the script: names shown by ps
	env         []string
	init        []byte // the opInit payload
	maxMessage  int
	logger      *slog.Logger // with the model, version and instance
	// bls serves a BLS request the worker sent (on a goroutine of its
	// own); nil refuses them.
	bls func(w *worker, f frame)
	// metric records a custom metric frame; nil drops them.
	metric func(payload []byte)
	// maxResult is the largest result frame read: one over it is skipped
	// and its call fails (opOversize). At most maxMessage.
	maxResult int
}

// worker is one running Python process and its end of the socket.
// Requests are multiplexed by id: any number of goroutines may call at
// once, the worker answers them in order.
type worker struct {
	spec    *workerSpec
	cmd     *exec.Cmd
	conn    *net.UnixConn
	pid     int
	readyAt time.Time

	wmu sync.Mutex  // serializes frame writes; protects fw
	fw  frameWriter // reused frame buffers

	ids atomic.Uint64

	mu      sync.Mutex // protects pending, streams and dead
	pending map[uint64]chan frame
	// streams receive the opResponse frames of execute calls to a
	// decoupled model, by call id, until endStream.
	streams map[uint64]*stream
	// execs are the contexts of the execute calls sent and not answered,
	// by id: a BLS request the worker sends belongs to the oldest.
	execs map[uint64]context.Context
	dead  error // why the reader stopped; set once

	// unanswered counts the frames sent and not answered yet, abandoned
	// calls included: the worker answers every frame, in order, so while
	// it is above zero the worker has work.
	unanswered atomic.Int64
	readerDone chan struct{} // closed when the reader has stopped
	exited     chan struct{} // closed when the process has been reaped
	exitErr    error         // cmd.Wait's error; read after exited
	outputDone chan struct{} // closed when stdout and stderr are drained
	stderr     *tailBuffer
}

// startWorker starts a worker process and waits until it has loaded the
// model (opReady) or failed to. ctx bounds the start.
func startWorker(ctx context.Context, spec *workerSpec) (*worker, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, socketType, 0)
	if err != nil {
		return nil, fmt.Errorf("create worker socket: %w", err)
	}
	parent := os.NewFile(uintptr(fds[0]), "sluice-worker-parent")
	child := os.NewFile(uintptr(fds[1]), "sluice-worker-child")
	// Once the process has started it holds its own copy of the child's
	// end; ours must be closed then, or a dying worker leaves the socket
	// open and its death unnoticed.
	defer child.Close()
	fc, err := net.FileConn(parent)
	_ = parent.Close() // FileConn holds a duplicate
	if err != nil {
		return nil, fmt.Errorf("create worker socket: %w", err)
	}
	conn := fc.(*net.UnixConn)

	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("create worker pipe: %w", err)
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		_ = conn.Close()
		_ = stdoutR.Close()
		_ = stdoutW.Close()
		return nil, fmt.Errorf("create worker pipe: %w", err)
	}

	// -u: unbuffered output, so prints reach the log as they happen.
	// -B: no .pyc files, which would change the model folder's content
	// (and so its fingerprint in poll mode).
	argv := append([]string{"-u", "-B", spec.dir + string(os.PathSeparator) + workerScript}, spec.args...)
	// The worker outlives the context of the load that starts it;
	// Instance.Close stops it.
	//nolint:gosec,noctx // G204: the interpreter is the operator's backend setting
	cmd := exec.Command(spec.interpreter, argv...)
	cmd.Env = spec.env
	cmd.Stdout, cmd.Stderr = stdoutW, stderrW
	cmd.ExtraFiles = []*os.File{child} // fd 3
	cmd.SysProcAttr = procAttr()
	err = cmd.Start()
	_ = child.Close()
	_ = stdoutW.Close()
	_ = stderrW.Close()
	if err != nil {
		_ = conn.Close()
		_ = stdoutR.Close()
		_ = stderrR.Close()
		return nil, fmt.Errorf("start python worker %s: %w", spec.interpreter, err)
	}
	w := &worker{
		spec:       spec,
		cmd:        cmd,
		conn:       conn,
		pid:        cmd.Process.Pid,
		pending:    map[uint64]chan frame{},
		streams:    map[uint64]*stream{},
		execs:      map[uint64]context.Context{},
		readerDone: make(chan struct{}),
		exited:     make(chan struct{}),
		outputDone: make(chan struct{}),
		stderr:     newTailBuffer(20, 512),
	}
	var outputs sync.WaitGroup
	outputs.Go(func() { w.copyOutput(stdoutR, slog.LevelInfo, "stdout", nil) })
	outputs.Go(func() { w.copyOutput(stderrR, slog.LevelWarn, "stderr", w.stderr) })
	go func() {
		outputs.Wait()
		close(w.outputDone)
	}()
	go func() {
		w.exitErr = cmd.Wait()
		close(w.exited)
	}()
	go w.read()

	if err := w.handshake(ctx); err != nil {
		w.kill()
		<-w.exited
		_ = w.conn.Close()
		<-w.readerDone
		<-w.outputDone
		return nil, err
	}
	w.readyAt = time.Now()
	return w, nil
}

// handshake sends opInit and waits for opReady.
func (w *worker) handshake(ctx context.Context) error {
	f, err := w.call(ctx, opInit, func(fw *frameWriter) error {
		fw.bytes(w.spec.init)
		return nil
	})
	if err != nil {
		if errors.Is(err, errDead) {
			return fmt.Errorf("python worker exited while loading the model: %w", err)
		}
		return fmt.Errorf("python worker did not load the model in time: %w%s", err, w.stderr.suffix())
	}
	switch f.op {
	case opReady:
		var info readyInfo
		if err := json.Unmarshal(f.payload, &info); err != nil {
			return fmt.Errorf("python worker sent a malformed ready message: %w", err)
		}
		if info.Protocol != protocolVersion {
			return fmt.Errorf("python worker speaks protocol %d, want %d", info.Protocol, protocolVersion)
		}
		w.spec.logger.Debug("python worker ready", "pid", w.pid, "python", info.Python, "numpy", info.Numpy)
		return nil
	case opError:
		we := parseWorkerError(f.payload)
		if we.Traceback != "" {
			w.spec.logger.Warn("python model failed to load", "pid", w.pid, "traceback", we.Traceback)
		}
		return errors.New(we.Message)
	default:
		return fmt.Errorf("python worker answered op %d to its start", f.op)
	}
}

func parseWorkerError(payload []byte) workerError {
	var we workerError
	if err := json.Unmarshal(payload, &we); err != nil || we.Message == "" {
		we.Message = "python worker reported an error it could not describe"
	}
	return we
}

// call sends one frame built by build and waits for the frame answering
// it. It returns errDead (wrapped, with the exit status) when the worker
// dies first, and the context's error when ctx ends first; the answer
// that comes later is dropped. Once build has run and the frame has been
// written, call no longer reads what build borrowed.
func (w *worker) call(ctx context.Context, op byte, build func(*frameWriter) error) (frame, error) {
	return w.callStreaming(ctx, op, nil, build)
}

// callStreaming is call; when st is not nil, the opResponse frames of the
// call go to st (from before the frame is sent) until endStream, and st
// learns of the worker's death.
func (w *worker) callStreaming(ctx context.Context, op byte, st *stream, build func(*frameWriter) error) (frame, error) {
	id := w.ids.Add(1)
	ch := make(chan frame, 1)
	w.mu.Lock()
	if w.dead != nil {
		err := w.dead
		w.mu.Unlock()
		return frame{}, fmt.Errorf("%w: %w", errNotSent, err)
	}
	w.pending[id] = ch
	if op == opExecute {
		w.execs[id] = ctx //nolint:fatcontext // kept by request id to cancel the execution, not nested
	}
	if st != nil {
		st.id = id
		w.streams[id] = st
	}
	w.mu.Unlock()

	if err := w.send(op, id, build); err != nil {
		w.forget(id)
		if st != nil {
			w.endStream(st)
		}
		return frame{}, err
	}
	select {
	case f, ok := <-ch:
		if !ok {
			return frame{}, w.deadErr()
		}
		return f, nil
	case <-ctx.Done():
		w.forget(id)
		return frame{}, context.Cause(ctx)
	}
}

// send writes one frame. A write that fails leaves the stream unusable,
// so the worker is killed and the error is a crash.
func (w *worker) send(op byte, id uint64, build func(*frameWriter) error) error {
	return w.write(op, id, true, build)
}

// sendAnswer writes a frame that answers the worker (it expects no
// answer back).
func (w *worker) sendAnswer(op byte, id uint64, build func(*frameWriter) error) error {
	return w.write(op, id, false, build)
}

// execContext returns the context of the oldest execute call the worker
// has not answered (the one it runs), or the background context.
func (w *worker) execContext() context.Context {
	w.mu.Lock()
	defer w.mu.Unlock()
	var oldest uint64
	ctx := context.Background()
	for id, c := range w.execs {
		if oldest == 0 || id < oldest {
			oldest, ctx = id, c
		}
	}
	return ctx
}

func (w *worker) write(op byte, id uint64, answered bool, build func(*frameWriter) error) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.fw.reset(op, id)
	if build != nil {
		if err := build(&w.fw); err != nil {
			return err
		}
	}
	bufs, err := w.fw.finish(w.spec.maxMessage)
	if err != nil {
		return err
	}
	if answered {
		w.unanswered.Add(1)
	}
	if _, err := bufs.WriteTo(w.conn); err != nil {
		w.kill()
		return fmt.Errorf("%w: write to worker: %w", errDead, err)
	}
	return nil
}

func (w *worker) forget(id uint64) {
	w.mu.Lock()
	delete(w.pending, id)
	delete(w.execs, id)
	w.mu.Unlock()
}

func (w *worker) deadErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dead
}

// read dispatches the worker's frames until the socket fails, then fails
// every pending call.
func (w *worker) read() {
	defer close(w.readerDone)
	r := bufio.NewReaderSize(w.conn, 64<<10)
	var hdr [headerSize]byte
	var cause error
	for {
		f, err := readFrameResult(r, &hdr, w.spec.maxMessage, cmp.Or(w.spec.maxResult, w.spec.maxMessage))
		if err != nil {
			cause = err
			break
		}
		if f.op == opLog {
			w.logLine(f.payload)
			continue
		}
		if f.op == opMetric {
			if w.spec.metric != nil {
				w.spec.metric(f.payload)
			}
			continue
		}
		if f.op == opBLS {
			if w.spec.bls != nil {
				go w.spec.bls(w, f)
			}
			continue
		}
		if f.op == opResponse {
			w.mu.Lock()
			st := w.streams[f.id]
			w.mu.Unlock()
			if st != nil {
				st.push(f)
			}
			continue
		}
		w.unanswered.Add(-1)
		w.mu.Lock()
		ch := w.pending[f.id]
		delete(w.pending, f.id)
		delete(w.execs, f.id)
		w.mu.Unlock()
		if ch != nil {
			ch <- f
		}
	}
	// A socket that fails while the process lives (a garbled frame) is
	// as good as dead: kill it so that it restarts.
	if !errors.Is(cause, io.EOF) && !errors.Is(cause, net.ErrClosed) {
		w.spec.logger.Warn("python worker protocol error; killing it", "pid", w.pid, "err", cause)
	}
	w.kill()
	// Wait for the exit status and the last lines of stderr, which say
	// why it died.
	timeout := time.After(5 * time.Second)
	select {
	case <-w.exited:
	case <-timeout:
	}
	select {
	case <-w.outputDone:
	case <-timeout:
	}
	dead := fmt.Errorf("%w (%s)%s", errDead, w.exitStatus(), w.stderr.suffix())
	w.mu.Lock()
	w.dead = dead
	pending := w.pending
	w.pending = nil
	streams := w.streams
	w.streams = nil
	w.mu.Unlock()
	for _, ch := range pending {
		close(ch)
	}
	for _, st := range streams {
		st.fail(dead)
	}
}

// streaming reports whether st still gets the call's frames (its call
// went out and the worker has not ended it).
func (w *worker) streaming(st *stream) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.streams[st.id] == st
}

// endStream stops routing a call's opResponse frames.
func (w *worker) endStream(st *stream) {
	w.mu.Lock()
	if w.streams != nil && w.streams[st.id] == st {
		delete(w.streams, st.id)
	}
	w.mu.Unlock()
}

// stream queues the opResponse frames of one execute call for the
// goroutine that hands them to the requests' senders, so that a slow
// receiver never holds up the worker's reader.
type stream struct {
	id   uint64 // the call's frame id; set by callStreaming
	mu   sync.Mutex
	q    []streamEvent
	wake chan struct{} // one token: the queue changed
}

// streamEvent is a frame, or an error that ends every request of the call
// still open (the worker died, or execute raised).
type streamEvent struct {
	f   frame
	err error
}

func newStream() *stream { return &stream{wake: make(chan struct{}, 1)} }

func (s *stream) add(e streamEvent) {
	s.mu.Lock()
	s.q = append(s.q, e)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *stream) push(f frame)   { s.add(streamEvent{f: f}) }
func (s *stream) fail(err error) { s.add(streamEvent{err: err}) }

// take returns the queued events, waiting for one.
func (s *stream) take() []streamEvent {
	for {
		s.mu.Lock()
		q := s.q
		s.q = nil
		s.mu.Unlock()
		if len(q) > 0 {
			return q
		}
		<-s.wake
	}
}

// failed reports whether the worker has died or stopped answering.
func (w *worker) failed() bool {
	select {
	case <-w.readerDone:
		return true
	case <-w.exited:
		return true
	default:
		return false
	}
}

// exitStatus describes how the process ended, or says it still runs.
func (w *worker) exitStatus() string {
	select {
	case <-w.exited:
	default:
		return "still running"
	}
	if w.exitErr == nil {
		return "exit status 0"
	}
	return w.exitErr.Error()
}

func (w *worker) logLine(payload []byte) {
	var l logLine
	if err := json.Unmarshal(payload, &l); err != nil {
		return
	}
	level := slog.LevelInfo
	switch l.Level {
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	case "debug":
		level = slog.LevelDebug
	}
	w.spec.logger.Log(context.Background(), level, "python model log", "pid", w.pid, "msg", truncate(l.Msg, 4096))
}

// copyOutput logs the process's stdout or stderr line by line.
func (w *worker) copyOutput(r *os.File, level slog.Level, stream string, tail *tailBuffer) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		line := sc.Text()
		if tail != nil {
			tail.add(line)
		}
		w.spec.logger.Log(context.Background(), level, "python worker output", "pid", w.pid, "stream", stream, "line", truncate(line, 4096))
	}
	// A line longer than the buffer ends the scan; drain the rest so the
	// worker never blocks on a full pipe.
	_, _ = io.Copy(io.Discard, r)
}

// alive reports whether the process has not exited.
func (w *worker) alive() bool {
	select {
	case <-w.exited:
		return false
	default:
		return true
	}
}

// signal sends sig to the worker's process group (the worker and any
// process it started), unless the worker has been reaped already: its pid
// may belong to someone else by then.
func (w *worker) signal(sig syscall.Signal) {
	if !w.alive() {
		return
	}
	_ = syscall.Kill(-w.pid, sig)
}

// kill ends the worker at once.
func (w *worker) kill() { w.signal(syscall.SIGKILL) }

// stop unloads the worker: finalize() within finalizeTimeout, then
// SIGTERM, then SIGKILL after killTimeout. It returns once the process is
// gone and its output has been logged; an error reports a finalize()
// that raised.
func (w *worker) stop(finalizeTimeout, killTimeout time.Duration) error {
	var ferr error
	if w.alive() {
		ctx, cancel := context.WithTimeout(context.Background(), finalizeTimeout)
		f, err := w.call(ctx, opFinalize, nil)
		cancel()
		if err == nil && len(f.payload) > 0 {
			we := parseWorkerError(f.payload)
			ferr = errors.New(we.Message)
			if we.Traceback != "" {
				w.spec.logger.Warn("python model finalize failed", "pid", w.pid, "traceback", we.Traceback)
			}
		}
		// The worker exits after answering; give it the rest of the grace.
		select {
		case <-w.exited:
		case <-time.After(finalizeTimeout):
			w.spec.logger.Warn("python worker did not exit after finalize; sending SIGTERM", "pid", w.pid)
			w.signal(syscall.SIGTERM)
			select {
			case <-w.exited:
			case <-time.After(killTimeout):
				w.spec.logger.Warn("python worker ignored SIGTERM; sending SIGKILL", "pid", w.pid)
				w.kill()
				<-w.exited
			}
		}
	}
	<-w.exited
	_ = w.conn.Close()
	<-w.readerDone
	<-w.outputDone
	return ferr
}

// ping checks that an idle worker answers within timeout. It reports
// false only for a worker that left the ping unanswered while it had
// nothing else to do: work sent after the ping may be what it is busy
// with, since the ping went out.
func (w *worker) ping(timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := w.call(ctx, opPing, nil)
	if err == nil || errors.Is(err, errDead) {
		return true // a dead worker is handled by its exit, not here
	}
	return w.unanswered.Load() > 1
}

// tailBuffer keeps the last lines written to it.
type tailBuffer struct {
	mu    sync.Mutex // protects lines
	lines []string
	max   int
	width int
}

func newTailBuffer(lines, width int) *tailBuffer {
	return &tailBuffer{max: lines, width: width}
}

func (t *tailBuffer) add(line string) {
	if strings.TrimSpace(line) == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, truncate(line, t.width))
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
}

// suffix is "; stderr: <last line>" or "".
func (t *tailBuffer) suffix() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return ""
	}
	return "; last stderr line: " + t.lines[len(t.lines)-1]
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
