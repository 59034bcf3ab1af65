// Package shadowhook is the gateway's shadow, a release hook
// (release.Hook): a successful call that falls in a service's shadow share
// is mirrored to the shadow's backend off the request path, and both arms
// (the primary answer and the shadow's) are handed to the recorder.
//
// The mirror (a bounded queue, its workers and the recorder) is one per
// gateway and outlives configurations; the hooks are made anew with each
// configuration and only queue jobs on it.
package shadowhook

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway/release"
	"github.com/sluice-ml/sluice/internal/gateway/route"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/release/record"
	"github.com/sluice-ml/sluice/internal/telemetry"
)

// Kind is the shadow hook's kind.
const Kind = "shadow"

// The shadow calls' spans belong to the gateway's traces: same
// instrumentation scope as the gateway's own spans.
var tracer = telemetry.Tracer("github.com/sluice-ml/sluice/internal/gateway")

// Recorder takes finished records (record.Writer): Offer never blocks.
// Run does the recorder's background work until Close (the mirror's Run
// starts it; a recorder never run does that work in Close).
type Recorder interface {
	Offer(rec *record.Record) bool
	Run()
	Close(ctx context.Context) error
}

// Encoder writes tensors as a record keeps them; the gateway's answer
// encoding, so that both arms read alike.
type Encoder interface {
	// Tensors are the model inputs in KServe v2 JSON tensor form.
	Tensors(ts []infer.Tensor) []record.Tensor
	// Outputs are a response's numeric outputs as flat float64 lists.
	Outputs(ts []infer.Tensor) map[string][]float64
}

// Options are what the mirror needs of its owner.
type Options struct {
	// Recording sizes the queue and the workers.
	Recording config.Recording
	// Recorder takes the records; nil drops them (shadow calls still run
	// and are counted).
	Recorder Recorder
	// Registerer gets the shadow metrics.
	Registerer prometheus.Registerer
	// Logger logs what the recorder did when it closes.
	Logger *slog.Logger
	// Encode writes the records' tensors.
	Encode Encoder
}

// job is one mirrored request: the primary's record, waiting for the
// shadow's answer. ctx is the primary call's, for the trace: the shadow
// call runs under context.WithoutCancel(ctx), with its own timeout.
type job struct {
	ctx     context.Context
	service string
	call    release.ModelCall
	timeout time.Duration
	backend string
	req     *infer.Request
	rec     *record.Record
}

// Mirror runs shadow calls off the request path: a bounded queue and a
// fixed set of workers (Run). A full queue drops the job and counts it.
type Mirror struct {
	o        Options
	sendMu   sync.Mutex // orders offers against the close of jobs; protects closed
	closed   bool
	jobs     chan *job
	workers  int
	done     chan struct{} // closed when Run's workers are done
	recorder Recorder
	// recRunning is set when Run started the recorder's Run; recDone
	// closes when that returns.
	recRunning atomic.Bool
	recDone    chan struct{}
	met        *metrics
	// abort ends when Finish stops waiting for the shadow calls: those in
	// flight are cancelled and the queued ones dropped. A cancellation
	// signal for the workers, not a request's context.
	abort     context.Context
	abortCall context.CancelFunc
}

type metrics struct {
	requests *prometheus.CounterVec   // service, result
	latency  *prometheus.HistogramVec // service
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		requests: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "gateway", Name: "shadow_requests_total",
			Help: "Mirrored requests by result: ok and error (the shadow answered or failed; both recorded), dropped (the shadow queue was full).",
		}, []string{"service", "result"})),
		latency: telemetry.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "gateway", Name: "shadow_duration_seconds",
			Help:    "Latency of shadow model calls.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"service"})),
	}
}

// NewMirror builds the mirror; it starts nothing.
func NewMirror(o Options) *Mirror {
	m := &Mirror{
		o: o, jobs: make(chan *job, o.Recording.QueueSize), workers: max(o.Recording.Workers, 1), done: make(chan struct{}),
		recorder: o.Recorder, recDone: make(chan struct{}), met: newMetrics(o.Registerer),
	}
	m.abort, m.abortCall = context.WithCancel(context.Background()) //nolint:gosec // G118: Finish calls abortCall when its ctx ends
	return m
}

// Queued is the number of jobs waiting for a worker.
func (m *Mirror) Queued() int { return len(m.jobs) }

// Run runs the shadow workers until the queue is closed and drained.
func (m *Mirror) Run() {
	defer close(m.done)
	if m.recorder != nil && m.recRunning.CompareAndSwap(false, true) {
		go func() { // waited for by CloseRecorder, after the recorder's Close
			defer close(m.recDone)
			m.recorder.Run()
		}()
	}
	var wg sync.WaitGroup
	for range m.workers {
		wg.Go(func() {
			for j := range m.jobs {
				m.run(j)
			}
		})
	}
	wg.Wait()
}

// Finish stops taking jobs and finishes the queued ones: Run's workers do
// when running says Run was started, else Finish does itself. When ctx
// ends first, the calls in flight are cancelled and the rest dropped.
// Then it closes the recorder, which flushes every record it accepted.
func (m *Mirror) Finish(ctx context.Context, running bool) error {
	m.sendMu.Lock()
	if !m.closed {
		m.closed = true
		close(m.jobs)
	}
	m.sendMu.Unlock()
	stop := context.AfterFunc(ctx, m.abortCall)
	defer stop()
	if running {
		<-m.done // the workers return soon after abort, if it comes to that
	} else {
		for j := range m.jobs {
			m.run(j)
		}
	}
	return m.CloseRecorder(ctx)
}

// CloseRecorder closes the recorder and logs what it did.
func (m *Mirror) CloseRecorder(ctx context.Context) error {
	if m.recorder == nil {
		return nil
	}
	err := m.recorder.Close(ctx)
	if m.recRunning.Load() {
		<-m.recDone
	}
	if st, ok := m.recorder.(interface{ Stats() record.WriterStats }); ok && m.o.Logger != nil {
		s := st.Stats()
		m.o.Logger.Info("recording closed", "accepted", s.Accepted, "dropped", s.Dropped, "written", s.Written,
			"spooled", s.Spooled, "recovered", s.Recovered, "dropped_by_policy", s.DroppedByPolicy, "failed", s.Failed, "damaged", s.Damaged, "lost", s.Lost())
	}
	return err
}

// offer queues j, or drops and counts it when the queue is full or closed.
func (m *Mirror) offer(j *job) {
	m.sendMu.Lock()
	defer m.sendMu.Unlock()
	if m.closed {
		m.met.requests.WithLabelValues(j.service, "dropped").Inc()
		return
	}
	select {
	case m.jobs <- j:
	default:
		m.met.requests.WithLabelValues(j.service, "dropped").Inc()
	}
}

// run calls the shadow model (one try, no retries: a shadow must not add
// load to a struggling backend) and records both arms. The call continues
// the primary's trace, but not its cancellation: the primary has answered
// by now.
func (m *Mirror) run(j *job) {
	if m.abort.Err() != nil {
		m.met.requests.WithLabelValues(j.service, "dropped").Inc()
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(j.ctx), j.timeout)
	defer cancel()
	stop := context.AfterFunc(m.abort, cancel)
	defer stop()
	ctx, span := tracer.Start(ctx, "gateway.shadow", trace.WithAttributes(
		attribute.String("service", j.service), attribute.String("backend", j.backend), attribute.String("version", j.req.Version)))
	start := time.Now()
	resp, err := j.call(ctx, j.req)
	lat := time.Since(start)
	span.End()
	m.met.latency.WithLabelValues(j.service).Observe(lat.Seconds())
	arm := record.Arm{Model: j.req.Model, Version: j.req.Version, LatencyMS: float64(lat.Microseconds()) / 1000}
	if err != nil {
		arm.Status, arm.Reason = apierr.HTTPStatus(err)
		m.met.requests.WithLabelValues(j.service, "error").Inc()
	} else {
		arm.Status, arm.Outputs = http.StatusOK, m.o.Encode.Outputs(resp.Outputs)
		if resp.Version != "" {
			arm.Version = resp.Version
		}
		m.met.requests.WithLabelValues(j.service, "ok").Inc()
	}
	j.rec.Arms[record.ArmShadow] = arm
	if m.recorder != nil {
		m.recorder.Offer(j.rec)
	}
}

// Hook is the release hook of a service with a shadow: a successful call
// that falls in the shadow share is mirrored to the shadow's backend,
// resolved when the configuration was applied. It holds no state of its
// own (the mirror is its owner's) and is made anew with each
// configuration.
type Hook struct {
	release.Base
	cfg     config.Shadow
	call    release.ModelCall
	m       *Mirror
	headers []string // recording.headers: the ones a record keeps
}

// Factory makes the shadow hooks of a configuration whose recording
// keeps headers, all queueing on m. A shadow whose backend the
// configuration lacks gets no hook (the configuration's check refuses it).
func Factory(m *Mirror, headers []string) release.Factory {
	return func(svc release.Service, _ release.Hook) (release.Hook, error) {
		sh := svc.Config().Shadow
		if sh == nil {
			return nil, nil
		}
		call := svc.ModelCall(sh.Backend)
		if call == nil {
			return nil, nil
		}
		return &Hook{cfg: *sh, call: call, m: m, headers: headers}, nil
	}
}

// Kind is "shadow".
func (h *Hook) Kind() string { return Kind }

// Answered queues a shadow call of the call when the request falls in the
// service's shadow share: the hash of the key field's value (else the
// request id) decides.
func (h *Hook) Answered(ctx context.Context, c release.Call) {
	key := c.RequestID()
	if v, ok := c.Field(h.cfg.Key); ok {
		key = v
	}
	if !route.InShare(key, h.cfg.Percent) {
		return
	}
	a, req, enc := c.Answer(), c.Request(), h.m.o.Encode
	rec := &record.Record{
		Schema: record.SchemaVersion, RequestID: c.RequestID(), Time: c.Start(), Service: c.Service(), ShadowKey: key,
		Headers: release.KeepHeaders(c.Header(), h.headers),
		Request: c.RequestMap(), Features: c.FeatureMap(),
		Inputs: enc.Tensors(req.Inputs),
		Arms: map[string]record.Arm{record.ArmPrimary: {
			Model: a.Model, Version: a.Version, Status: http.StatusOK,
			LatencyMS: float64(c.Latency().Microseconds()) / 1000, Outputs: enc.Outputs(c.Response().Outputs), Source: a.Source,
		}},
	}
	sreq := &infer.Request{ID: c.RequestID(), Model: h.cfg.Model, Version: h.cfg.Version, Inputs: req.Inputs, Outputs: req.Outputs}
	h.m.offer(&job{ctx: ctx, service: c.Service(), call: h.call, timeout: h.cfg.Timeout.Std(), backend: h.cfg.Backend, req: sreq, rec: rec})
}
