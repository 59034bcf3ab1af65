package gateway

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/gateway/route"
	"github.com/sluice-ml/sluice/internal/httpapi"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/release/record"
	"github.com/sluice-ml/sluice/internal/telemetry"
)

// Recorder takes finished records (record.Writer): Offer never blocks.
type Recorder interface {
	Offer(rec *record.Record) bool
	Close(ctx context.Context) error
}

// MirrorBuckets is the resolution of the shadow share: a request is
// mirrored when Hash(key) % MirrorBuckets < percent × MirrorBuckets / 100.
const MirrorBuckets = 10_000

// Mirrored reports whether a request whose shadow key is key falls in the
// mirrored share percent. It depends only on key and percent, so every
// replica, and every replay of a recording, mirrors the same requests.
func Mirrored(key string, percent float64) bool {
	return float64(route.Hash(key)%MirrorBuckets) < percent*MirrorBuckets/100
}

// serviceShadow is a service's compiled shadow configuration.
type serviceShadow struct {
	cfg      config.Shadow
	keyField int // index into service.fields; -1: the request id
}

// shadowJob is one mirrored request: the primary's exchange, waiting for
// the shadow's answer before it is recorded.
type shadowJob struct {
	s   *service
	b   *backend
	req *infer.Request
	rec *record.Record
}

// mirror runs shadow calls off the request path: a bounded queue and a
// fixed set of workers. A full queue drops the job and counts it.
type mirror struct {
	sendMu   sync.Mutex // orders offers against the close of jobs
	jobs     chan *shadowJob
	wg       sync.WaitGroup
	closed   chan struct{}
	once     sync.Once
	recorder Recorder
	met      *shadowMetrics
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

func (g *Gateway) startMirror(rc config.Recording) {
	g.mirror = &mirror{
		jobs: make(chan *shadowJob, rc.QueueSize), closed: make(chan struct{}),
		recorder: g.opts.Recorder, met: newShadowMetrics(g.reg),
	}
	for range rc.Workers {
		g.mirror.wg.Go(func() {
			for j := range g.mirror.jobs {
				g.runShadow(j)
			}
		})
	}
}

// closeMirror stops taking jobs, finishes the queued ones (until ctx ends)
// and closes the recorder, which flushes every record it accepted.
func (g *Gateway) closeMirror(ctx context.Context) error {
	m := g.mirror
	if m == nil {
		return nil
	}
	m.once.Do(func() {
		close(m.closed)
		m.sendMu.Lock()
		close(m.jobs)
		m.sendMu.Unlock()
	})
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	if m.recorder == nil {
		return nil
	}
	err := m.recorder.Close(ctx)
	if st, ok := m.recorder.(interface{ Stats() record.WriterStats }); ok {
		s := st.Stats()
		g.logger.Info("recording closed", "accepted", s.Accepted, "dropped", s.Dropped, "written", s.Written,
			"spooled", s.Spooled, "recovered", s.Recovered, "dropped_by_policy", s.DroppedByPolicy, "failed", s.Failed, "lost", s.Lost())
	}
	return err
}

// maybeMirror queues a shadow call of a successful primary exchange when
// the request falls in the service's shadow share.
func (g *Gateway) maybeMirror(st *state, s *service, r *http.Request, reqID string, start time.Time, vals []value,
	feats *serving.Response, req *infer.Request, resp *infer.Response, a *answer, latency time.Duration,
) {
	sh := s.shadow
	if sh == nil || g.mirror == nil {
		return
	}
	key := reqID
	if sh.keyField >= 0 && vals[sh.keyField].set {
		key = vals[sh.keyField].text
	}
	if !Mirrored(key, sh.cfg.Percent) {
		return
	}
	b, ok := st.backends[sh.cfg.Backend]
	if !ok {
		return
	}
	rec := &record.Record{
		Schema: record.SchemaVersion, RequestID: reqID, Time: start, Service: s.name, ShadowKey: key,
		Headers: recordHeaders(r.Header, st.cfg.Recording.Headers),
		Request: s.requestMap(vals), Features: s.featureMap(feats),
		Inputs: recordTensors(req.Inputs),
		Arms: map[string]record.Arm{record.ArmPrimary: {
			Model: a.model, Version: a.version, Status: http.StatusOK,
			LatencyMS: float64(latency.Microseconds()) / 1000, Outputs: outputMap(resp.Outputs), Source: a.source,
		}},
	}
	sreq := &infer.Request{ID: reqID, Model: sh.cfg.Model, Version: sh.cfg.Version, Inputs: req.Inputs, Outputs: req.Outputs}
	g.mirror.offer(s.name, &shadowJob{s: s, b: b, req: sreq, rec: rec})
}

// offer queues j, or drops and counts it when the queue is full or closed.
func (m *mirror) offer(service string, j *shadowJob) {
	m.sendMu.Lock()
	defer m.sendMu.Unlock()
	select {
	case <-m.closed:
		m.met.requests.WithLabelValues(service, "dropped").Inc()
		return
	default:
	}
	select {
	case m.jobs <- j:
	default:
		m.met.requests.WithLabelValues(service, "dropped").Inc()
	}
}

// runShadow calls the shadow model (one try, no retries: a shadow must not
// add load to a struggling backend) and records both arms.
func (g *Gateway) runShadow(j *shadowJob) {
	s := j.s
	ctx, cancel := context.WithTimeout(context.Background(), s.shadow.cfg.Timeout.Std())
	defer cancel()
	start := time.Now()
	resp, _, err := g.call(ctx, s, j.b, nil, j.req)
	lat := time.Since(start)
	g.mirror.met.latency.WithLabelValues(s.name).Observe(lat.Seconds())
	arm := record.Arm{Model: j.req.Model, Version: j.req.Version, LatencyMS: float64(lat.Microseconds()) / 1000}
	if err != nil {
		arm.Status, arm.Reason = httpapi.StatusOf(err)
		g.mirror.met.requests.WithLabelValues(s.name, "error").Inc()
	} else {
		arm.Status, arm.Outputs = http.StatusOK, outputMap(resp.Outputs)
		if resp.Version != "" {
			arm.Version = resp.Version
		}
		g.mirror.met.requests.WithLabelValues(s.name, "ok").Inc()
	}
	j.rec.Arms[record.ArmShadow] = arm
	if g.mirror.recorder != nil {
		g.mirror.recorder.Offer(j.rec)
	}
}

// recordHeaders keeps the allow-listed headers, lower-cased.
func recordHeaders(h http.Header, allow []string) map[string]string {
	out := make(map[string]string, len(allow))
	for _, name := range allow {
		if v := h.Get(name); v != "" {
			out[strings.ToLower(name)] = v
		}
	}
	return out
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
		case !t.List:
			out[name] = fv.F64
		case len(fv.F32s) > 0:
			l := make([]float64, len(fv.F32s))
			for i, x := range fv.F32s {
				l[i] = float64(x)
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
			out[ts[i].Name] = ov.values
		}
	}
	return out
}
