package gateway

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/gateway/release"
	"github.com/sluice-ml/sluice/internal/gateway/route"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/release/record"
	"github.com/sluice-ml/sluice/internal/telemetry"
)

// Recorder takes finished records (record.Writer): Offer never blocks.
// Run does the recorder's background work until Close (Gateway.RunBackground
// starts it; a recorder never run does that work in Close).
type Recorder interface {
	Offer(rec *record.Record) bool
	Run()
	Close(ctx context.Context) error
}

// MirrorBuckets is the resolution of the shadow share: a request is
// mirrored when Hash(key) % MirrorBuckets < percent × MirrorBuckets / 100.
const MirrorBuckets = route.ShareBuckets

// Mirrored reports whether a request whose shadow key is key falls in the
// mirrored share percent (route.InShare). It depends only on key and
// percent, so every replica, and every replay of a recording, mirrors the
// same requests.
func Mirrored(key string, percent float64) bool { return route.InShare(key, percent) }

// serviceShadow is a service's compiled shadow configuration.
type serviceShadow struct {
	cfg      config.Shadow
	keyField int // index into service.fields; -1: the request id
}

// shadowJob is one mirrored request: the primary's exchange, waiting for
// the shadow's answer before it is recorded. ctx is the primary call's,
// for the trace: the shadow call runs under context.WithoutCancel(ctx),
// with its own timeout.
type shadowJob struct {
	ctx context.Context
	s   *service
	b   *backend
	req *infer.Request
	rec *record.Record
}

// mirror runs shadow calls off the request path: a bounded queue and a
// fixed set of workers (run, started by Gateway.RunBackground). A full queue drops
// the job and counts it.
type mirror struct {
	sendMu   sync.Mutex // orders offers against the close of jobs; protects closed
	closed   bool
	jobs     chan *shadowJob
	workers  int
	done     chan struct{} // closed when run's workers are done
	recorder Recorder
	// recRunning is set when run started the recorder's Run; recDone
	// closes when that returns.
	recRunning atomic.Bool
	recDone    chan struct{}
	met        *shadowMetrics
	// abort ends when Close stops waiting for the shadow calls: those in
	// flight are cancelled and the queued ones dropped. A cancellation
	// signal for the workers, not a request's context.
	abort     context.Context
	abortCall context.CancelFunc
}

type shadowMetrics struct {
	requests *prometheus.CounterVec   // service, result
	latency  *prometheus.HistogramVec // service
}

func newShadowMetrics(reg prometheus.Registerer) *shadowMetrics {
	return &shadowMetrics{
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

// newMirror builds the mirror; it starts nothing.
func newMirror(rc config.Recording, rec Recorder, reg prometheus.Registerer) *mirror {
	m := &mirror{
		jobs: make(chan *shadowJob, rc.QueueSize), workers: max(rc.Workers, 1), done: make(chan struct{}),
		recorder: rec, recDone: make(chan struct{}), met: newShadowMetrics(reg),
	}
	m.abort, m.abortCall = context.WithCancel(context.Background()) //nolint:gosec // G118: finish calls abortCall when its ctx ends
	return m
}

// run runs the shadow workers until the queue is closed and drained.
func (m *mirror) run(g *Gateway) {
	defer close(m.done)
	if m.recorder != nil && m.recRunning.CompareAndSwap(false, true) {
		go func() { // waited for by closeRecorder, after the recorder's Close
			defer close(m.recDone)
			m.recorder.Run()
		}()
	}
	var wg sync.WaitGroup
	for range m.workers {
		wg.Go(func() {
			for j := range m.jobs {
				g.runShadow(j)
			}
		})
	}
	wg.Wait()
}

// finish stops taking jobs and finishes the queued ones: run's workers
// do when Gateway.RunBackground started them, else finish does itself. When ctx
// ends first, the calls in flight are cancelled and the rest dropped.
// Then it closes the recorder, which flushes every record it accepted.
func (m *mirror) finish(ctx context.Context, g *Gateway, running bool) error {
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
			g.runShadow(j)
		}
	}
	return m.closeRecorder(ctx, g)
}

// closeRecorder closes the recorder and logs what it did.
func (m *mirror) closeRecorder(ctx context.Context, g *Gateway) error {
	if m.recorder == nil {
		return nil
	}
	err := m.recorder.Close(ctx)
	if m.recRunning.Load() {
		<-m.recDone
	}
	if st, ok := m.recorder.(interface{ Stats() record.WriterStats }); ok && g != nil {
		s := st.Stats()
		g.logger.Info("recording closed", "accepted", s.Accepted, "dropped", s.Dropped, "written", s.Written,
			"spooled", s.Spooled, "recovered", s.Recovered, "dropped_by_policy", s.DroppedByPolicy, "failed", s.Failed, "damaged", s.Damaged, "lost", s.Lost())
	}
	return err
}

// shadowHook is the release hook of a service with a shadow: a
// successful call that falls in the shadow share is mirrored to the
// shadow's backend, resolved when the configuration was loaded. It holds
// no state of its own (the mirror is the gateway's) and is made anew with
// each configuration.
type shadowHook struct {
	release.Base
	sh      *serviceShadow
	b       *backend
	m       *mirror
	headers []string // recording.headers: the ones a record keeps
}

// kindShadow is the shadow hook's kind.
const kindShadow = "shadow"

// shadowFactory makes the shadow hooks of st's services.
func (g *Gateway) shadowFactory(st *state) release.Factory {
	return func(svc release.Service, _ release.Hook) (release.Hook, error) {
		s := st.byName[svc.Name()]
		if s.shadow == nil {
			return nil, nil
		}
		b, ok := st.backends[s.shadow.cfg.Backend]
		if !ok {
			return nil, nil
		}
		return &shadowHook{sh: s.shadow, b: b, m: g.mirror, headers: st.cfg.Recording.Headers}, nil
	}
}

// Kind is "shadow".
func (h *shadowHook) Kind() string { return kindShadow }

// Answered queues a shadow call of the call's exchange when the request
// falls in the service's shadow share.
func (h *shadowHook) Answered(ctx context.Context, c release.Call) {
	x := c.(*exchange) // a record keeps the whole exchange
	s, sh := x.s, h.sh
	key := x.reqID
	if sh.keyField >= 0 && x.vals[sh.keyField].set {
		key = x.vals[sh.keyField].text(s.fields[sh.keyField].kind)
	}
	if !Mirrored(key, sh.cfg.Percent) {
		return
	}
	a := &x.answer
	rec := &record.Record{
		Schema: record.SchemaVersion, RequestID: x.reqID, Time: x.start, Service: s.name, ShadowKey: key,
		Headers: release.KeepHeaders(x.call.Header, h.headers),
		Request: s.requestMap(x.vals), Features: s.featureMap(x.feats),
		Inputs: recordTensors(x.req.Inputs),
		Arms: map[string]record.Arm{record.ArmPrimary: {
			Model: a.Model, Version: a.Version, Status: http.StatusOK,
			LatencyMS: float64(x.callLatency.Microseconds()) / 1000, Outputs: outputMap(x.resp.Outputs), Source: a.Source,
		}},
	}
	sreq := &infer.Request{ID: x.reqID, Model: sh.cfg.Model, Version: sh.cfg.Version, Inputs: x.req.Inputs, Outputs: x.req.Outputs}
	h.m.offer(s.name, &shadowJob{ctx: ctx, s: s, b: h.b, req: sreq, rec: rec})
}

// offer queues j, or drops and counts it when the queue is full or closed.
func (m *mirror) offer(service string, j *shadowJob) {
	m.sendMu.Lock()
	defer m.sendMu.Unlock()
	if m.closed {
		m.met.requests.WithLabelValues(service, "dropped").Inc()
		return
	}
	select {
	case m.jobs <- j:
	default:
		m.met.requests.WithLabelValues(service, "dropped").Inc()
	}
}

// runShadow calls the shadow model (one try, no retries: a shadow must not
// add load to a struggling backend) and records both arms. The call
// continues the primary's trace, but not its cancellation: the primary
// has answered by now.
func (g *Gateway) runShadow(j *shadowJob) {
	s, m := j.s, g.mirror
	if m.abort.Err() != nil {
		m.met.requests.WithLabelValues(s.name, "dropped").Inc()
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(j.ctx), s.shadow.cfg.Timeout.Std())
	defer cancel()
	stop := context.AfterFunc(m.abort, cancel)
	defer stop()
	ctx, span := tracer.Start(ctx, "gateway.shadow", trace.WithAttributes(
		attribute.String("service", s.name), attribute.String("backend", j.b.name), attribute.String("version", j.req.Version)))
	start := time.Now()
	resp, _, err := g.call(ctx, s, j.b, nil, j.req)
	lat := time.Since(start)
	span.End()
	m.met.latency.WithLabelValues(s.name).Observe(lat.Seconds())
	arm := record.Arm{Model: j.req.Model, Version: j.req.Version, LatencyMS: float64(lat.Microseconds()) / 1000}
	if err != nil {
		arm.Status, arm.Reason = apierr.HTTPStatus(err)
		m.met.requests.WithLabelValues(s.name, "error").Inc()
	} else {
		arm.Status, arm.Outputs = http.StatusOK, outputMap(resp.Outputs)
		if resp.Version != "" {
			arm.Version = resp.Version
		}
		m.met.requests.WithLabelValues(s.name, "ok").Inc()
	}
	j.rec.Arms[record.ArmShadow] = arm
	if m.recorder != nil {
		m.recorder.Offer(j.rec)
	}
}

// requestMap is the request body as parsed.
func (s *service) requestMap(vals []value) map[string]any {
	out := make(map[string]any, len(vals))
	for i := range vals {
		v := &vals[i]
		if !v.set {
			continue
		}
		switch s.fields[i].kind {
		case kindInt64:
			out[s.fields[i].name] = v.i
		case kindBool:
			out[s.fields[i].name] = v.b
		case kindString:
			out[s.fields[i].name] = v.s
		case kindFloat32:
			// The float64 nearest the float32's shortest decimal: 0.4
			// is recorded as 0.4, not 0.4000000059604645.
			out[s.fields[i].name] = shortest(v.f, infer.FP32)
		default:
			out[s.fields[i].name] = v.f
		}
	}
	return out
}

// featureMap is the features read, "view__feature" → number, list or nil.
func (s *service) featureMap(feats *serving.Response) map[string]any {
	if feats == nil {
		return nil
	}
	out := make(map[string]any, len(s.features))
	for col, ref := range s.features {
		name := strings.Replace(ref, ":", "__", 1)
		fv, _ := featureCell(feats, col)
		if fv == nil {
			out[name] = nil
			continue
		}
		t := s.featureTypes[col]
		switch {
		case !t.List && (t.Kind == feature.KindInt32 || t.Kind == feature.KindInt64):
			out[name] = fv.I64
		case !t.List && t.Kind == feature.KindBool:
			out[name] = fv.Bool
		case !t.List && t.Kind == feature.KindString:
			out[name] = fv.S
		case !t.List && t.Kind == feature.KindFloat32:
			out[name] = shortest(fv.F64, infer.FP32)
		case !t.List:
			out[name] = fv.F64
		case len(fv.F32s) > 0:
			l := make([]float64, len(fv.F32s))
			for i, x := range fv.F32s {
				l[i] = shortest(float64(x), infer.FP32)
			}
			out[name] = l
		case len(fv.F64s) > 0:
			out[name] = fv.F64s
		default:
			out[name] = fv.I64s
		}
	}
	return out
}

// recordTensors writes the model inputs in KServe v2 JSON tensor form.
func recordTensors(ts []infer.Tensor) []record.Tensor {
	out := make([]record.Tensor, len(ts))
	for i := range ts {
		t := &ts[i]
		out[i] = record.Tensor{Name: t.Name, DataType: t.DataType.String(), Shape: append([]int64(nil), t.Shape...), Data: tensorJSON(t)}
	}
	return out
}

// tensorJSON is a numeric tensor's data as a flat JSON array.
func tensorJSON(t *infer.Tensor) []byte {
	size := t.DataType.Size()
	if size == 0 {
		return []byte("[]")
	}
	n := len(t.Data) / size
	b := make([]byte, 0, n*10+2)
	b = append(b, '[')
	for j := range n {
		if j > 0 {
			b = append(b, ',')
		}
		el := infer.Tensor{DataType: t.DataType, Data: t.Data[j*size : (j+1)*size]}
		x, _ := scalar(&el)
		b = appendFloat(b, x, t.DataType)
	}
	return append(b, ']')
}

// outputMap is a response's numeric outputs as flat float64 lists.
func outputMap(ts []infer.Tensor) map[string][]float64 {
	out := make(map[string][]float64, len(ts))
	for i := range ts {
		if ov, ok := tensorValues(ts[i].Name, &ts[i]); ok {
			for j, x := range ov.Values {
				ov.Values[j] = shortest(x, ts[i].DataType)
			}
			out[ts[i].Name] = ov.Values
		}
	}
	return out
}
