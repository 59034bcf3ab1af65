package record

import (
	"bytes"
	"context"
	"crypto/md5" //nolint:gosec // G501: compared with the store's own content MD5, not used for security
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/objstore"
	"github.com/sluice-ml/sluice/internal/telemetry"
)

// DefaultArchiveInterval is how often an Archiver looks for rotated files
// when ArchiveOptions.Interval is 0.
const DefaultArchiveInterval = 30 * time.Second

// ArchiveOptions configure an Archiver.
type ArchiveOptions struct {
	// Dir is the folder of the FileSink whose rotated files are archived.
	Dir string
	// Base is the sink's file name prefix: <Base>-*.jsonl files are
	// archived, other files are left alone.
	Base string
	// Location is the bucket folder the files go to (s3://, gs://,
	// as://), each under its own file name, so that Open reads them back
	// in order. Credentials come from the environment (objstore.OpenURI).
	Location string
	// Interval is how often the folder is scanned; a rotation starts a
	// scan at once. 0 means DefaultArchiveInterval.
	Interval time.Duration
	// Label names the log in metrics and log lines ("recordings",
	// "predictions").
	Label string
	// Getenv reads credentials; os.Getenv when nil.
	Getenv func(string) string
}

// ArchiveStats count an Archiver's work.
type ArchiveStats struct {
	// Uploaded files, and their bytes, verified in the bucket and removed
	// locally.
	Uploaded, Bytes int64
	// Failures counts failed upload attempts (the file stays local and is
	// tried again).
	Failures int64
	// Pending is how many rotated files wait locally after the last scan.
	Pending int
}

// Archiver moves a FileSink's rotated files to object storage: each
// finished file is uploaded, checked in the bucket (its size, and its
// content MD5 — from the store's metadata, or by reading the object back
// where the store reports none), and only then deleted locally. A file
// that fails stays where it is and is tried again at the next scan, in
// name order, so an outage of the bucket loses nothing: the files wait
// on local disk and go up when the store is back. Files left by an
// earlier process are found by the first scan. The file the sink is
// writing is never touched.
type Archiver struct {
	opts    ArchiveOptions
	bucket  *objstore.Bucket
	log     *slog.Logger
	metrics *archiveMetrics
	kick    chan struct{}

	mu     sync.Mutex // protects active, stats, down
	active func() string
	stats  ArchiveStats
	down   bool

	passMu sync.Mutex // one scan at a time

	stop chan struct{}
	done chan struct{}
}

type archiveMetrics struct {
	uploaded, failed prometheus.Counter
	bytes            prometheus.Counter
	pending          prometheus.Gauge
}

func newArchiveMetrics(reg prometheus.Registerer, label string) *archiveMetrics {
	files := telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sluice", Subsystem: "release", Name: "archive_files_total",
		Help: "Rotated recording and prediction log files by log and result: uploaded (verified in the bucket and removed locally) or failed (an upload or its check failed; the file stays local and is tried again).",
	}, []string{"log", "result"}))
	bytes := telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sluice", Subsystem: "release", Name: "archive_bytes_total",
		Help: "Bytes of rotated files uploaded to object storage and verified there, by log.",
	}, []string{"log"}))
	pending := telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "sluice", Subsystem: "release", Name: "archive_pending_files",
		Help: "Rotated files waiting on local disk for upload to object storage after the last scan, by log; it grows while the bucket is unreachable.",
	}, []string{"log"}))
	return &archiveMetrics{
		uploaded: files.WithLabelValues(label, "uploaded"),
		failed:   files.WithLabelValues(label, "failed"),
		bytes:    bytes.WithLabelValues(label),
		pending:  pending.WithLabelValues(label),
	}
}

// NewArchiver checks opts and opens the bucket (without contacting it).
// Call Start to begin, and Close to finish. A nil logger discards; a nil
// registerer registers nothing.
func NewArchiver(ctx context.Context, opts ArchiveOptions, logger *slog.Logger, reg prometheus.Registerer) (*Archiver, error) {
	if opts.Dir == "" {
		return nil, errors.New("archive: no directory")
	}
	if opts.Base == "" {
		opts.Base = "records"
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultArchiveInterval
	}
	if opts.Label == "" {
		opts.Label = opts.Base
	}
	b, err := objstore.OpenURI(ctx, opts.Location, objstore.Options{Getenv: opts.Getenv})
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Archiver{
		opts: opts, bucket: b, metrics: newArchiveMetrics(reg, opts.Label),
		log:  logger.With("component", "record_archive", "log", opts.Label, "location", b.Location().String()),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}, nil
}

// Kick starts a scan soon (a FileSink calls it on rotation); it never
// blocks.
func (a *Archiver) Kick() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Start begins scanning in the background. active returns the file the
// sink is writing ("" for none), which is never archived; nil means no
// file is being written.
func (a *Archiver) Start(active func() string) {
	a.mu.Lock()
	a.active = active
	a.mu.Unlock()
	go a.loop()
}

func (a *Archiver) loop() {
	defer close(a.done)
	t := time.NewTicker(a.opts.Interval)
	defer t.Stop()
	for {
		_ = a.Sync(context.Background()) // failures are counted, logged and retried
		select {
		case <-a.stop:
			return
		case <-t.C:
		case <-a.kick:
		}
	}
}

// Close stops the background scans and makes one last attempt, bounded
// by ctx, to upload what the sink has finished; what it cannot upload
// stays on local disk for the next start. Close the sink first, so that
// its last file is finished too.
func (a *Archiver) Close(ctx context.Context) error {
	select {
	case <-a.stop:
	default:
		close(a.stop)
	}
	select {
	case <-a.done:
	case <-ctx.Done():
	}
	err := a.Sync(ctx)
	return errors.Join(err, a.bucket.Close())
}

// Stats returns the counts so far.
func (a *Archiver) Stats() ArchiveStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// finished lists the sink's finished files in name order.
func (a *Archiver) finished() ([]string, error) {
	files, err := filepath.Glob(filepath.Join(a.opts.Dir, a.opts.Base+"-*.jsonl"))
	if err != nil {
		return nil, err
	}
	// Read the active file after listing: a file created after the listing
	// is not in it, and every listed file but the active one is finished.
	a.mu.Lock()
	active := a.active
	a.mu.Unlock()
	if active != nil {
		if cur := active(); cur != "" {
			files = slices.DeleteFunc(files, func(f string) bool { return filepath.Clean(f) == filepath.Clean(cur) })
		}
	}
	slices.Sort(files)
	return files, nil
}

// Sync uploads every finished file now, oldest first, stopping at the
// first failure (the rest wait for the next scan). It returns that
// failure.
func (a *Archiver) Sync(ctx context.Context) error {
	a.passMu.Lock()
	defer a.passMu.Unlock()
	files, err := a.finished()
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	for i, f := range files {
		n, err := a.upload(ctx, f)
		if err != nil {
			a.setPending(len(files) - i)
			a.failed(err)
			return err
		}
		a.mu.Lock()
		a.stats.Uploaded++
		a.stats.Bytes += n
		wasDown := a.down
		a.down = false
		a.mu.Unlock()
		a.metrics.uploaded.Inc()
		a.metrics.bytes.Add(float64(n))
		if wasDown {
			a.log.Info("archive reachable again; uploading the files that waited")
		}
		a.log.Debug("file archived", "file", filepath.Base(f), "bytes", n)
	}
	a.setPending(0)
	return nil
}

func (a *Archiver) setPending(n int) {
	a.mu.Lock()
	a.stats.Pending = n
	a.mu.Unlock()
	a.metrics.pending.Set(float64(n))
}

// failed counts a failure and logs the first of an outage.
func (a *Archiver) failed(err error) {
	a.mu.Lock()
	a.stats.Failures++
	first := !a.down
	a.down = true
	a.mu.Unlock()
	a.metrics.failed.Inc()
	if first {
		a.log.Warn("archive upload failed; rotated files stay on local disk and are retried", "err", err)
	} else {
		a.log.Debug("archive upload failed again", "err", err)
	}
}

// upload copies one file to the bucket, checks it there and removes it
// locally; it returns the file's size.
func (a *Archiver) upload(ctx context.Context, path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil // archived by a scan that raced this one's listing
		}
		return 0, fmt.Errorf("archive: %w", err)
	}
	defer f.Close()
	key := filepath.Base(path)
	sum := md5.New() //nolint:gosec // G401: see the import
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := a.bucket.NewWriter(wctx, key)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(w, io.TeeReader(f, sum))
	if err != nil {
		cancel() // abandon the half-written object
		_ = w.Close()
		return 0, fmt.Errorf("archive %s: %w", key, err)
	}
	if err := w.Close(); err != nil {
		return 0, err
	}
	local := sum.Sum(nil)
	if err := a.verify(ctx, key, n, local); err != nil {
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("archive: %w", err)
	}
	if err := os.Remove(path); err != nil {
		return 0, fmt.Errorf("archive: remove the uploaded %s: %w", path, err)
	}
	return n, nil
}

// verify checks the object at key against the local file's size and MD5.
func (a *Archiver) verify(ctx context.Context, key string, size int64, sum []byte) error {
	attrs, err := a.bucket.Attributes(ctx, key)
	if err != nil {
		return err
	}
	if attrs.Size != size {
		return fmt.Errorf("archive %s: the bucket holds %d bytes, the file has %d", key, attrs.Size, size)
	}
	remote := attrs.MD5
	if len(remote) == 0 {
		r, err := a.bucket.NewReader(ctx, key, 0, -1)
		if err != nil {
			return err
		}
		h := md5.New() //nolint:gosec // G401: see the import
		_, err = io.Copy(h, r)
		_ = r.Close() // read-only
		if err != nil {
			return err
		}
		remote = h.Sum(nil)
	}
	if !bytes.Equal(remote, sum) {
		return fmt.Errorf("archive %s: the bucket's copy differs from the file", key)
	}
	return nil
}

// archiveCloseTimeout bounds Close's last upload when its context has no
// deadline.
const archiveCloseTimeout = 30 * time.Second

// ArchivedFileSink is a FileSink whose finished files an Archiver moves to
// object storage.
type ArchivedFileSink struct {
	*FileSink
	arch *Archiver
}

// NewArchivedFileSink opens a FileSink (fopts) and an Archiver of its
// files (aopts; Dir and Base are the sink's) and starts the archiver.
func NewArchivedFileSink(ctx context.Context, fopts FileOptions, aopts ArchiveOptions, logger *slog.Logger, reg prometheus.Registerer) (*ArchivedFileSink, error) {
	if fopts.Base == "" {
		fopts.Base = "records"
	}
	aopts.Dir, aopts.Base = fopts.Dir, fopts.Base
	arch, err := NewArchiver(ctx, aopts, logger, reg)
	if err != nil {
		return nil, err
	}
	fopts.OnRotate = arch.Kick
	fs, err := NewFileSink(fopts, logger)
	if err != nil {
		_ = arch.bucket.Close() // never started
		return nil, err
	}
	arch.Start(fs.Current)
	return &ArchivedFileSink{FileSink: fs, arch: arch}, nil
}

// Archiver returns the sink's archiver.
func (s *ArchivedFileSink) Archiver() *Archiver { return s.arch }

// Close closes the file sink, then the archiver, which uploads the last
// file (bounded by ctx, or by 30s when ctx has no deadline); what it
// cannot upload stays on disk for the next start.
func (s *ArchivedFileSink) Close(ctx context.Context) error {
	err := s.FileSink.Close(ctx)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, archiveCloseTimeout)
		defer cancel()
	}
	return errors.Join(err, s.arch.Close(ctx))
}
