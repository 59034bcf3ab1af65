package config

import (
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/sluice-ml/sluice/internal/accuracy/accuracyspec"
	"github.com/sluice-ml/sluice/internal/admission/limitspec"
)

// The servers' defaults, each defined here once: sluice.yaml's
// applyDefaults and the flags of sluice serve and sluice feature-server
// (internal/cli) both use them, and a test there checks that the docs'
// tables agree. The standalone commands bind every interface, as Triton
// and Feast do (DefaultListenAddress); under serve -c only the gateway
// faces the network (DefaultChainAddress).
const (
	// DefaultListenAddress is what the standalone servers bind to.
	DefaultListenAddress = "0.0.0.0"
	// DefaultChainAddress is what model_server and feature_server bind to.
	DefaultChainAddress = "127.0.0.1"
	// DefaultModelHTTPPort is the model server's KServe v2 HTTP port.
	DefaultModelHTTPPort = 8000
	// DefaultModelGRPCPort is the model server's KServe v2 gRPC port.
	DefaultModelGRPCPort = 8001
	// DefaultModelMetricsPort is the model server's /metrics port.
	DefaultModelMetricsPort = 8002
	// DefaultModelMaxBodyBytes is the model server's largest request.
	DefaultModelMaxBodyBytes = 64 << 20
	// DefaultControlMode is the model server's model control mode.
	DefaultControlMode = "none"
	// DefaultRepositoryPollInterval is the time between repository polls
	// in poll mode.
	DefaultRepositoryPollInterval = 15 * time.Second
	// DefaultExitTimeout is how long a server waits for in-flight
	// requests at shutdown.
	DefaultExitTimeout = 30 * time.Second
	// DefaultFeaturePort is the feature server's HTTP port (Feast's).
	DefaultFeaturePort = 6566
	// DefaultFeatureMaxBodyBytes is the feature server's largest request
	// under serve -c.
	DefaultFeatureMaxBodyBytes = 16 << 20
	// DefaultReadAuth is the feature server's read access: "open".
	DefaultReadAuth = "open"
	// DefaultMaxEntityRows caps the entity rows of one feature request.
	DefaultMaxEntityRows = 10000
	// DefaultRegistryPollInterval is the time between the feature
	// server's checks of its definitions and registry.
	DefaultRegistryPollInterval = 10 * time.Second
	// DefaultRepositoryCacheBytes is the largest object-storage model
	// repository the local copy holds: 20 GiB.
	DefaultRepositoryCacheBytes = 20 << 30
	// DefaultStrictReadiness is the standalone model server's readiness
	// mode, Triton's; under serve -c it is false (model_server.strict_readiness).
	DefaultStrictReadiness = true
	// DefaultTritonMetrics exports the inference metrics under Triton's
	// names (nv_inference_*) too.
	DefaultTritonMetrics = true
	// DefaultServerName is the name in the model server's metadata.
	DefaultServerName = "sluice"
	// DefaultCompressMinBytes is the smallest response body compressed
	// unless a server's setting says otherwise (zpool.DefaultMinBytes). A
	// body under it with its response headers fits one TCP segment
	// (1,460 bytes on Ethernet) compressed or not, so compressing it
	// saves no packet and costs CPU: parcel_eta's 214-byte answer shrinks
	// by 26 bytes (12 %) for about as much CPU as the rest of the
	// request. Envoy's compressor filter has the same knob,
	// min_content_length.
	DefaultCompressMinBytes = 1024
	// DefaultMaxOutputBytes is the most output bytes (tensor data, all
	// outputs together) one request may get from a model unless the
	// model's config or the server says otherwise
	// (modelrepo.DefaultMaxOutputBytes): the largest request the KServe
	// edges accept, so that an echo of any accepted request fits.
	DefaultMaxOutputBytes = DefaultModelMaxBodyBytes
)

// NewModelServer returns the model server's settings with every default
// set, as sluice model-server starts from them: its flags are bound to
// the fields with these values as their defaults. sluice.yaml's
// model_server fills what it leaves unset from the same values, except
// the address (DefaultChainAddress) and readiness (not strict).
func NewModelServer() ModelServer {
	return ModelServer{
		Address:                DefaultListenAddress,
		Limits:                 limitspec.DefaultLimits(DefaultModelMaxBodyBytes),
		HTTPPort:               DefaultModelHTTPPort,
		GRPCPort:               DefaultModelGRPCPort,
		MetricsPort:            DefaultModelMetricsPort,
		ControlMode:            DefaultControlMode,
		RepositoryPollInterval: Duration(DefaultRepositoryPollInterval),
		RepositoryCacheBytes:   DefaultRepositoryCacheBytes,
		StrictReadiness:        new(DefaultStrictReadiness),
		ExitTimeout:            Duration(DefaultExitTimeout),
		TritonMetrics:          new(DefaultTritonMetrics),
		ServerName:             DefaultServerName,
		CompressMinBytes:       DefaultCompressMinBytes,
		MaxOutputBytes:         DefaultMaxOutputBytes,
	}
}

// NewFeatureServer returns the feature server's settings with every
// default set, as sluice feature-server starts from them (its flags are
// bound to the fields); sluice.yaml's feature_server fills what it leaves
// unset from the same values, except the address (DefaultChainAddress).
func NewFeatureServer() FeatureServer {
	return FeatureServer{
		Address:              DefaultListenAddress,
		Port:                 DefaultFeaturePort,
		ReadAuth:             DefaultReadAuth,
		MaxEntityRows:        DefaultMaxEntityRows,
		Limits:               limitspec.DefaultLimits(DefaultFeatureMaxBodyBytes),
		RegistryPollInterval: Duration(DefaultRegistryPollInterval),
		ExitTimeout:          Duration(DefaultExitTimeout),
	}
}

// applyDefaults fills the fields the file left unset.
func (c *Config) applyDefaults() {
	if m := c.ModelServer; m != nil {
		d := NewModelServer()
		m.Address = or(m.Address, DefaultChainAddress)
		m.Limits = limitsOr(m.Limits, d.Limits.MaxBodyBytes)
		m.HTTPPort = or(m.HTTPPort, d.HTTPPort)
		m.GRPCPort = or(m.GRPCPort, d.GRPCPort)
		m.MetricsPort = or(m.MetricsPort, d.MetricsPort)
		m.ControlMode = or(m.ControlMode, d.ControlMode)
		m.RepositoryPollInterval = or(m.RepositoryPollInterval, d.RepositoryPollInterval)
		m.RepositoryCacheBytes = or(m.RepositoryCacheBytes, d.RepositoryCacheBytes)
		if m.StrictReadiness == nil {
			// Triton's default is strict, but a chain serves several
			// models behind one pod: one that fails to load shows in its
			// own readiness (/v2/models/<name>/ready, the console) rather
			// than taking the others out of a load balancer's rotation.
			m.StrictReadiness = new(false)
		}
		c.applyModelServerDefaults(m, d)
	}
	if f := c.FeatureServer; f != nil {
		d := NewFeatureServer()
		f.Address = or(f.Address, DefaultChainAddress)
		f.Port = or(f.Port, d.Port)
		f.ReadAuth = or(f.ReadAuth, d.ReadAuth)
		f.MaxEntityRows = or(f.MaxEntityRows, d.MaxEntityRows)
		f.Limits = limitsOr(f.Limits, d.Limits.MaxBodyBytes)
		written := c.writtenUnder("feature_server")
		if !written("registry_poll_interval") {
			f.RegistryPollInterval = or(f.RegistryPollInterval, d.RegistryPollInterval)
		}
		if !written("exit_timeout") {
			f.ExitTimeout = d.ExitTimeout
		}
	}
	if c.Security == nil {
		c.Security = &Security{}
	}
	c.Security.AuditLog = or(c.Security.AuditLog, "stderr")
	c.Security.MemoryBudgetBytes = or(c.Security.MemoryBudgetBytes, limitspec.DefaultBudgetBytes)
	if c.Cluster != nil {
		c.Cluster.applyDefaults()
	}
	g := c.Gateway
	if g == nil {
		return
	}
	g.Limits = limitsOr(g.Limits, 1<<20)
	g.Listen = or(g.Listen, ":8080")
	g.DrainPeriod = or(g.DrainPeriod, Duration(2*time.Second))
	if !c.writtenUnder("gateway")("exit_timeout") {
		g.ExitTimeout = Duration(DefaultExitTimeout)
	}
	g.AccessLog = or(g.AccessLog, "stdout")
	rc := &g.Recording
	rc.Sink = or(rc.Sink, "jsonl")
	rc.Dir = or(rc.Dir, "recordings")
	rc.MaxBytes = or(rc.MaxBytes, 64<<20)
	rc.MaxAge = or(rc.MaxAge, Duration(time.Hour))
	rc.NATS.URL = or(rc.NATS.URL, "nats://127.0.0.1:4222")
	rc.NATS.Stream = or(rc.NATS.Stream, "SLUICE_RECORDINGS")
	rc.NATS.SubjectPrefix = or(rc.NATS.SubjectPrefix, "sluice.recordings")
	if rc.Headers == nil {
		rc.Headers = []string{"x-request-id", "x-user-type", "x-region"}
	}
	rc.QueueSize = or(rc.QueueSize, 4096)
	rc.Workers = or(rc.Workers, 4)
	rc.Spool.Dir = or(rc.Spool.Dir, filepath.Join(rc.Dir, "spool"))
	if rc.Archive.Location != "" {
		rc.Archive.Interval = or(rc.Archive.Interval, Duration(accuracyspec.DefaultArchiveInterval))
	}
	rc.Spool.MaxBytes = or(rc.Spool.MaxBytes, 1<<30)
	rc.Spool.Full = or(rc.Spool.Full, "drop_newest")
	rc.CloseTimeout = or(rc.CloseTimeout, Duration(5*time.Second))
	for _, s := range g.Services {
		if s.Accuracy != nil && g.Accuracy == nil {
			g.Accuracy = &accuracyspec.Gateway{}
		}
	}
	if g.Accuracy != nil {
		if c.Cluster != nil && g.Accuracy.Store == "" {
			// A fleet joins across replicas: pending predictions live in
			// the cluster's NATS.
			g.Accuracy.Store = "nats"
		}
		g.Accuracy.ApplyDefaults()
	}
	if p := g.Proxy; p != nil {
		p.PathPrefix = or(p.PathPrefix, "/v2/")
		p.Timeout = or(p.Timeout, Duration(time.Second))
		p.Retries.applyDefaults(p.Timeout, func(rel string) bool { return c.writtenUnder("gateway.proxy.retries")(rel) })
	}
	g.Admin = or(g.Admin, "127.0.0.1:9901")
	for i := range g.Clients {
		g.Clients[i].RateLimit.applyDefaults()
	}
	g.Anonymous.RateLimitPerIP.applyDefaults()
	g.RateLimitBackend.Type = or(g.RateLimitBackend.Type, "local")
	g.RateLimitBackend.Redis.KeyPrefix = or(g.RateLimitBackend.Redis.KeyPrefix, "sluice:rl:")
	g.RateLimitBackend.Redis.DialTimeout = or(g.RateLimitBackend.Redis.DialTimeout, Duration(200*time.Millisecond))
	for i := range g.Services {
		g.Services[i].applyDefaults(c.writtenUnder(fmt.Sprintf("gateway.services[%d]", i)))
	}
	for i := range g.Backends {
		b := &g.Backends[i]
		b.LoadBalancing = or(b.LoadBalancing, "least_request")
		b.HealthCheck.Interval = or(b.HealthCheck.Interval, Duration(5*time.Second))
		b.HealthCheck.Timeout = or(b.HealthCheck.Timeout, Duration(time.Second))
		od := &b.OutlierDetection
		od.ErrorRatePercent = or(od.ErrorRatePercent, 5)
		od.Interval = or(od.Interval, Duration(10*time.Second))
		od.Consecutive503 = or(od.Consecutive503, 3)
		od.MinRequestVolume = or(od.MinRequestVolume, 20)
		od.Window = or(od.Window, Duration(time.Minute))
		od.BaseEjectionTime = or(od.BaseEjectionTime, Duration(30*time.Second))
		od.MaxEjectionPercent = or(od.MaxEjectionPercent, 50)
	}
	if g.LogSampling.SuccessPercent == nil {
		g.LogSampling.SuccessPercent = new(1.0)
	}
	if g.LogSampling.ErrorsPercent == nil {
		g.LogSampling.ErrorsPercent = new(100.0)
	}
}

func (r *RateLimit) applyDefaults() {
	if r.Burst == 0 && r.RequestsPerSecond > 0 {
		r.Burst = max(1, int(math.Min(math.Ceil(r.RequestsPerSecond), math.MaxInt32)))
	}
}

// applyModelServerDefaults fills the model_server settings that stand
// for a command-line flag of their own from d, NewModelServer's; a 0
// written for exit_timeout or compress_min_bytes is kept.
func (c *Config) applyModelServerDefaults(m *ModelServer, d ModelServer) {
	written := c.writtenUnder("model_server")
	if !written("exit_timeout") {
		m.ExitTimeout = d.ExitTimeout
	}
	if !written("compress_min_bytes") {
		m.CompressMinBytes = d.CompressMinBytes
	}
	if m.TritonMetrics == nil {
		m.TritonMetrics = d.TritonMetrics
	}
	m.ServerName = or(m.ServerName, d.ServerName)
	m.MaxOutputBytes = or(m.MaxOutputBytes, d.MaxOutputBytes)
}

// writtenUnder returns a test of whether a path below prefix was written
// in the file, so a default replaces only what the file left out, not an
// explicit zero ("num_retries: 0" means no retries).
func (c *Config) writtenUnder(prefix string) func(rel string) bool {
	return func(rel string) bool {
		if c.src == nil {
			return false
		}
		_, ok := c.src.pos[prefix+"."+rel]
		return ok
	}
}

func (s *Service) applyDefaults(written func(rel string) bool) {
	for i := range s.Entities {
		s.Entities[i].Type = or(s.Entities[i].Type, "int64")
	}
	for i := range s.RequestFields {
		s.RequestFields[i].Type = or(s.RequestFields[i].Type, "float32")
	}
	for i := range s.Inputs {
		s.Inputs[i].Datatype = or(s.Inputs[i].Datatype, "FP32")
		s.Inputs[i].Missing = or(s.Inputs[i].Missing, "fail")
		s.Inputs[i].Unreadable = or(s.Inputs[i].Unreadable, "fail")
	}
	for i := range s.Outputs {
		s.Outputs[i].From = or(s.Outputs[i].From, s.Outputs[i].Name)
	}
	for i := range s.Routes {
		r := &s.Routes[i]
		r.Timeout = or(r.Timeout, Duration(time.Second))
		if h := r.Match.EntityHash; h != nil {
			h.Modulo = or(h.Modulo, 100)
		}
		r.Retries.applyDefaults(r.Timeout, func(rel string) bool { return written(fmt.Sprintf("routes[%d].retries.%s", i, rel)) })
	}
	if sh := s.Shadow; sh != nil {
		sh.Model = or(sh.Model, s.Model.Name)
		if sh.Backend == "" && len(s.Routes) > 0 && len(s.Routes[0].Route.Weighted) > 0 {
			sh.Backend = s.Routes[0].Route.Weighted[0].Backend
		}
		sh.Percent = or(sh.Percent, 1)
		sh.Timeout = or(sh.Timeout, Duration(time.Second))
	}
	if a := s.Accuracy; a != nil {
		a.ApplyDefaults()
	}
	if d := s.Drift; d != nil {
		d.RecordFor = or(d.RecordFor, Duration(time.Hour))
		d.Window = or(d.Window, Duration(time.Hour))
		d.Interval = or(d.Interval, Duration(30*time.Second))
		d.PSIThreshold = or(d.PSIThreshold, 0.25)
		d.KSAlpha = or(d.KSAlpha, 0.01)
	}
	fb := &s.FeatureBreaker
	if !written("feature_breaker.stale_threshold") {
		fb.StaleThreshold = or(fb.StaleThreshold, 10)
	}
	fb.Window = or(fb.Window, Duration(5*time.Minute))
	fb.ProbeInterval = or(fb.ProbeInterval, Duration(5*time.Second))
	if f := s.Fallback; f != nil {
		f.Output = or(f.Output, "eta_prediction")
		f.BaselineWindow = or(f.BaselineWindow, Duration(time.Hour))
		f.History = or(f.History, 24)
		f.Trigger.Percentile = or(f.Trigger.Percentile, 90)
		f.Trigger.Band = or(f.Trigger.Band, 15)
		f.Trigger.Duration = or(f.Trigger.Duration, Duration(10*time.Minute))
		f.Trigger.ClearDuration = or(f.Trigger.ClearDuration, Duration(time.Minute))
		f.Window = or(f.Window, Duration(time.Minute))
		f.Confidence.Output = or(f.Confidence.Output, "confidence_score")
		f.Confidence.Below = or(f.Confidence.Below, 0.7)
	}
}

// applyDefaults fills a retry policy; nil stays nil (no retries).
func (rp *RetryPolicy) applyDefaults(timeout Duration, written func(rel string) bool) {
	if rp == nil {
		return
	}
	if !written("num_retries") {
		rp.NumRetries = or(rp.NumRetries, 1)
	}
	rp.PerTryTimeout = or(rp.PerTryTimeout, timeout)
	if !written("budget.percent") {
		rp.Budget.Percent = or(rp.Budget.Percent, 20)
	}
	if !written("budget.min_concurrency") {
		rp.Budget.MinConcurrency = or(rp.Budget.MinConcurrency, 3)
	}
}

// or returns v, or def when v is the zero value.
func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// limitsOr fills a listener's unset limits from admission's defaults with
// the given body limit.
func limitsOr(l Limits, maxBody int64) Limits {
	d := limitspec.DefaultLimits(maxBody)
	l.MaxBodyBytes = or(l.MaxBodyBytes, d.MaxBodyBytes)
	l.MaxHeaderBytes = or(l.MaxHeaderBytes, d.MaxHeaderBytes)
	l.MaxHeaderCount = or(l.MaxHeaderCount, d.MaxHeaderCount)
	return l
}
