package cluster

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/telemetry"
)

// Defaults for Options.
const (
	DefaultURL             = "nats://127.0.0.1:4222"
	DefaultName            = "sluice"
	DefaultBucketPrefix    = "SLUICE"
	DefaultPublishInterval = 250 * time.Millisecond
	DefaultReplicaTTL      = 5 * time.Second
	DefaultConnectTimeout  = 10 * time.Second
	// opTimeout bounds one read or write.
	opTimeout = 2 * time.Second
	// writeTimeout bounds one write to the connection, so a hung server
	// fails the connection within seconds.
	writeTimeout = 2 * time.Second
	// maxValueBytes bounds one value (a bucket's max_value_size).
	maxValueBytes = 1 << 20
)

// Errors of the compare-and-set writes and reads.
var (
	// ErrConflict: the key's revision moved (another replica wrote first),
	// or Create found the key.
	ErrConflict = errors.New("cluster: the key changed first")
	// ErrNotFound: no such key.
	ErrNotFound = errors.New("cluster: key not found")
)

// Options configure a Cluster.
type Options struct {
	// URL is the server, or several comma-separated. Default DefaultURL.
	URL string
	// TLS, when set, makes the connection TLS with it.
	TLS *tls.Config
	// Credentials is a NATS credentials file; empty: none.
	Credentials string
	// Name is the fleet's name and BucketPrefix the buckets' prefix:
	// bucket "x" is <BucketPrefix>_<Name>_x.
	Name, BucketPrefix string
	// Replica names this process (default: host name and pid).
	Replica string
	// PublishInterval is the publishers' period; ReplicaTTL how long
	// another replica's published entries stay fresh.
	PublishInterval, ReplicaTTL time.Duration
	// ConnectTimeout bounds Connect.
	ConnectTimeout time.Duration
}

func (o *Options) defaults() {
	if o.URL == "" {
		o.URL = DefaultURL
	}
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.BucketPrefix == "" {
		o.BucketPrefix = DefaultBucketPrefix
	}
	if o.Replica == "" {
		host, _ := os.Hostname()
		o.Replica = Key(host) + "-" + strconv.Itoa(os.Getpid())
	}
	if o.PublishInterval <= 0 {
		o.PublishInterval = DefaultPublishInterval
	}
	if o.ReplicaTTL <= 0 {
		o.ReplicaTTL = DefaultReplicaTTL
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
}

// Cluster is the connection to a fleet's shared state. Its methods are
// safe for concurrent use.
type Cluster struct {
	opts Options
	log  *slog.Logger
	m    *metrics

	nc *nats.Conn
	js jetstream.JetStream

	mu         sync.Mutex // protects buckets and publishers
	buckets    []*Bucket
	publishers map[string]publisher // by bucket name + key

	lastSync atomic.Int64 // unix nanoseconds of the last answer from the server
	down     atomic.Bool  // the last write or ping failed: said once in the log
	resync   chan struct{}
}

type publisher struct {
	b   *Bucket
	key string
	fn  func() []byte
}

// New returns a Cluster; it connects to nothing and starts no goroutine.
// A nil logger discards; a nil reg registers nothing.
func New(opts Options, logger *slog.Logger, reg prometheus.Registerer) *Cluster {
	opts.defaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{
		opts:       opts,
		log:        logger.With("component", "cluster", "fleet", opts.Name, "replica", opts.Replica),
		publishers: map[string]publisher{},
		resync:     make(chan struct{}, 1),
	}
	c.m = newMetrics(reg, c)
	return c
}

// Replica is this process's name in the fleet.
func (c *Cluster) Replica() string { return c.opts.Replica }

// ReplicaTTL is how long another replica's published entries stay fresh.
func (c *Cluster) ReplicaTTL() time.Duration { return c.opts.ReplicaTTL }

// Connect dials the server, waiting at most ConnectTimeout (or ctx) for
// it; afterwards the client reconnects for ever.
func (c *Cluster) Connect(ctx context.Context) error {
	timeout := c.opts.ConnectTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	opts := []nats.Option{
		nats.Name("sluice-cluster-" + c.opts.Replica),
		nats.Timeout(min(timeout, 5*time.Second)),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.FlusherTimeout(writeTimeout),
		nats.ReconnectOnFlusherError(),
		nats.ReconnectBufSize(-1),
		nats.PingInterval(2 * time.Second),
		nats.MaxPingsOutstanding(2),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			c.m.connected.Set(0)
			if err != nil {
				c.log.Warn("nats disconnected: keeping the last shared state", "err", err)
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) {
			c.m.connected.Set(1)
			c.log.Info("nats reconnected: resynchronizing the shared state")
			select {
			case c.resync <- struct{}{}:
			default:
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.log.Warn("nats connection error", "err", err)
		}),
	}
	if c.opts.TLS != nil {
		opts = append(opts, nats.Secure(c.opts.TLS))
	}
	if c.opts.Credentials != "" {
		opts = append(opts, nats.UserCredentials(c.opts.Credentials))
	}
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if c.nc, err = nats.Connect(c.opts.URL, opts...); err == nil {
			break
		}
		if time.Now().Add(250*time.Millisecond).After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("cluster: connect %s: %w", redactURL(c.opts.URL), err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: connect %s: %w", redactURL(c.opts.URL), ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	if c.js, err = jetstream.New(c.nc); err != nil {
		c.nc.Close()
		return fmt.Errorf("cluster: %w", err)
	}
	c.m.connected.Set(1)
	c.synced()
	c.log.Info("connected to the fleet's shared state", "url", redactURL(c.opts.URL))
	return nil
}

func redactURL(u string) string {
	var out []string
	for s := range strings.SplitSeq(u, ",") {
		if at := strings.LastIndexByte(s, '@'); at >= 0 {
			if i := strings.Index(s, "://"); i >= 0 && i < at {
				s = s[:i+3] + "***" + s[at:]
			}
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

// synced records an answer from the server.
func (c *Cluster) synced() {
	c.lastSync.Store(time.Now().UnixNano())
	if c.down.CompareAndSwap(true, false) {
		c.log.Info("shared state reachable again")
	}
}

// failed records a failed write or ping.
func (c *Cluster) failed(err error) {
	if c.down.CompareAndSwap(false, true) {
		c.log.Warn("shared state unreachable: serving with the last state seen", "err", err)
	}
}

// BucketOptions configure a bucket.
type BucketOptions struct {
	// Description says what the bucket holds.
	Description string
	// TTL, when positive, removes entries not written for that long.
	TTL time.Duration
	// Memory keeps the bucket in the server's memory instead of on disk.
	Memory bool
	// MaxBytes bounds the bucket (0: unlimited).
	MaxBytes int64
}

// Bucket creates (or opens) the fleet's bucket called purpose and reads
// its current entries. Connect must have succeeded.
func (c *Cluster) Bucket(ctx context.Context, purpose string, o BucketOptions) (*Bucket, error) {
	if c.js == nil {
		return nil, errors.New("cluster: not connected")
	}
	name := c.opts.BucketPrefix + "_" + c.opts.Name + "_" + purpose
	storage := jetstream.FileStorage
	if o.Memory {
		storage = jetstream.MemoryStorage
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	kv, err := c.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: name, Description: o.Description, History: 1, TTL: o.TTL,
		MaxValueSize: maxValueBytes, MaxBytes: cmp.Or(o.MaxBytes, -1), Storage: storage,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: bucket %s: %w", name, err)
	}
	b := &Bucket{c: c, name: name, kv: kv, entries: map[string]Entry{}}
	if err := b.load(ctx); err != nil {
		return nil, fmt.Errorf("cluster: bucket %s: %w", name, err)
	}
	c.mu.Lock()
	c.buckets = append(c.buckets, b)
	c.mu.Unlock()
	return b, nil
}

// Publish makes Run write fn's value to key of b every PublishInterval
// (nothing when fn returns nil). A second Publish of the same key replaces
// the first; fn nil removes it.
func (c *Cluster) Publish(b *Bucket, key string, fn func() []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := b.name + "\x00" + key
	if fn == nil {
		delete(c.publishers, id)
		return
	}
	c.publishers[id] = publisher{b: b, key: key, fn: fn}
}

// Run keeps the buckets' caches current and runs the publishers until ctx
// ends.
func (c *Cluster) Run(ctx context.Context) error {
	if c.nc == nil {
		return errors.New("cluster: Run before Connect")
	}
	var wg sync.WaitGroup
	for {
		wctx, stop := context.WithCancel(ctx)
		c.mu.Lock()
		buckets := append([]*Bucket(nil), c.buckets...)
		c.mu.Unlock()
		for _, b := range buckets {
			wg.Go(func() { b.watch(wctx) })
		}
		again := c.publishLoop(ctx)
		stop()
		wg.Wait()
		if !again {
			return nil
		}
	}
}

// publishLoop runs the publishers until ctx ends (false) or a reconnect
// asks for the watchers to restart (true).
func (c *Cluster) publishLoop(ctx context.Context) bool {
	t := time.NewTicker(c.opts.PublishInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-c.resync:
			return true
		case <-t.C:
		}
		c.publishOnce(ctx)
	}
}

func (c *Cluster) publishOnce(ctx context.Context) {
	c.mu.Lock()
	pubs := make([]publisher, 0, len(c.publishers))
	for _, p := range c.publishers {
		pubs = append(pubs, p)
	}
	c.mu.Unlock()
	if len(pubs) == 0 {
		if _, err := c.nc.RTT(); err != nil {
			c.failed(err)
		} else {
			c.synced()
		}
		return
	}
	for _, p := range pubs {
		v := p.fn()
		if v == nil {
			continue
		}
		if _, err := p.b.Put(ctx, p.key, v); err != nil {
			c.m.publishErrors.WithLabelValues(p.b.name).Inc()
		}
	}
}

// Status is the connection's state for the admin API.
type Status struct {
	// Fleet and Replica name the fleet and this process.
	Fleet   string `json:"fleet"`
	Replica string `json:"replica"`
	// Connected says whether the connection is up now.
	Connected bool `json:"connected"`
	// LastSync is when the server last answered; LastSyncAgeSeconds how
	// long ago.
	LastSync           time.Time `json:"last_sync"`
	LastSyncAgeSeconds float64   `json:"last_sync_age_seconds"`
	// Stale says the state in use may be behind the fleet's: the server
	// has not answered for longer than the replica TTL.
	Stale bool `json:"stale"`
	// Buckets are the buckets in use.
	Buckets []string `json:"buckets"`
}

// Status returns the connection's state.
func (c *Cluster) Status() Status {
	s := Status{Fleet: c.opts.Name, Replica: c.opts.Replica, Connected: c.nc != nil && c.nc.IsConnected()}
	if ns := c.lastSync.Load(); ns > 0 {
		s.LastSync = time.Unix(0, ns).UTC()
		s.LastSyncAgeSeconds = time.Since(s.LastSync).Seconds()
	}
	s.Stale = !s.Connected || c.down.Load() || s.LastSyncAgeSeconds > c.opts.ReplicaTTL.Seconds()
	c.mu.Lock()
	for _, b := range c.buckets {
		s.Buckets = append(s.Buckets, b.name)
	}
	c.mu.Unlock()
	return s
}

// Close closes the connection.
func (c *Cluster) Close() {
	if c.nc != nil {
		c.nc.Close()
	}
	c.m.connected.Set(0)
}

type metrics struct {
	connected     prometheus.Gauge
	conflicts     *prometheus.CounterVec
	publishErrors *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, c *Cluster) *metrics {
	m := &metrics{
		connected: telemetry.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_cluster_connected",
			Help: "1 while the connection to the fleet's shared state (NATS JetStream) is up.",
		})),
		conflicts: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cluster_cas_conflicts_total",
			Help: "Compare-and-set writes to a shared bucket that another replica won.",
		}, []string{"bucket"})),
		publishErrors: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cluster_publish_errors_total",
			Help: "Periodic publishes (window counts) to a shared bucket that failed.",
		}, []string{"bucket"})),
	}
	telemetry.Register(reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_cluster_last_sync_age_seconds",
		Help: "Seconds since the fleet's shared state last answered (a write, a watch update or a ping).",
	}, func() float64 {
		ns := c.lastSync.Load()
		if ns == 0 {
			return 0
		}
		return time.Since(time.Unix(0, ns)).Seconds()
	}))
	return m
}
