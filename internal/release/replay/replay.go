package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/sluice-ml/sluice/internal/kserve"
	"github.com/sluice-ml/sluice/internal/release/record"
)

// Defaults for zero Options fields.
const (
	DefaultConcurrency   = 4
	DefaultTimeout       = 30 * time.Second
	DefaultProgressEvery = 250 * time.Millisecond
)

// Options configure a Replayer. The zero value replays as fast as
// DefaultConcurrency calls allow.
type Options struct {
	// Rate limits the calls started per second; 0 means no limit. Calls
	// start evenly spaced (no bursts).
	Rate float64
	// Concurrency bounds the calls in flight. Default DefaultConcurrency.
	Concurrency int
	// Timeout bounds one call; a call that takes longer is recorded as a
	// 504. Default DefaultTimeout.
	Timeout time.Duration
	// Total is the number of records the source will yield, when the
	// caller knows it (for a progress bar); 0 when unknown. Progress
	// reports the exact count once the source is exhausted.
	Total int
	// Progress, when set, is called at most every ProgressEvery and once
	// more at the end (with Final set), always from the goroutine that
	// called Run.
	Progress func(Progress)
	// ProgressEvery is the interval between Progress calls. Default
	// DefaultProgressEvery.
	ProgressEvery time.Duration
}

// Progress is a snapshot of a running replay.
type Progress struct {
	// Done counts the records replayed (answered, successfully or not).
	Done int
	// Total is the number of records to replay: Options.Total, or the
	// records read so far once the source is exhausted; 0 while unknown.
	Total int
	// Errors counts the replayed records whose answer was not a 2xx.
	Errors int
	// Rate is Done per second of Elapsed.
	Rate float64
	// Elapsed is the time since Run started.
	Elapsed time.Duration
	// Final is set on the last call, after every record was written.
	Final bool
}

// Stats are the counts of a finished (or stopped) replay.
type Stats struct {
	// Read counts the records taken from the source.
	Read int
	// Replayed counts the records whose call finished (answered or
	// failed); Errors those of them whose answer was not a 2xx.
	Replayed, Errors int
	// Written counts the records written to the sink.
	Written int
	// Aborted counts the records read but not replayed because the
	// replay was stopped; they are not written.
	Aborted int
	// Elapsed is the duration of Run.
	Elapsed time.Duration
}

// Replayer sends recorded requests to a Target and records the answers as
// a new recording.
type Replayer struct {
	target Target
	opts   Options
	log    *slog.Logger
	m      *metrics
}

// New returns a Replayer for target. A nil logger discards; a nil reg
// registers nothing.
func New(target Target, opts Options, logger *slog.Logger, reg prometheus.Registerer) (*Replayer, error) {
	if target == nil {
		return nil, errors.New("replay: no target")
	}
	switch {
	case opts.Rate < 0 || opts.Rate != opts.Rate:
		return nil, fmt.Errorf("replay: invalid rate %v", opts.Rate)
	case opts.Concurrency < 0:
		return nil, fmt.Errorf("replay: invalid concurrency %d", opts.Concurrency)
	case opts.Timeout < 0:
		return nil, fmt.Errorf("replay: negative timeout %s", opts.Timeout)
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.ProgressEvery <= 0 {
		opts.ProgressEvery = DefaultProgressEvery
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Replayer{target: target, opts: opts, log: logger.With("component", "replay"), m: newMetrics(reg)}, nil
}

// job is one record on its way through the replay.
type job struct {
	seq int
	rec *record.Record
	out *record.Record // nil when the call was aborted
}

// Run replays every record src yields and writes one record per replayed
// request to sink, in src's order whatever order the calls finish in.
// Each written record keeps the original's request_id, time, service,
// shadow key, headers, request, features and inputs, and holds a single
// arm, "primary", with the target's answer and the call's latency.
//
// Run reads src to its end (it does not close src or sink). When ctx ends
// it stops reading, abandons the calls in flight and writes, still in
// order, every record whose call had finished; it then returns the stats
// and ctx's cause. A source error stops the replay the same way (the
// records read before it are replayed and written) and is returned; a
// sink error stops it at once.
func (r *Replayer) Run(ctx context.Context, src record.Source, sink record.Sink) (Stats, error) {
	start := time.Now()
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)

	// window bounds the records between the reader and the writer, so a
	// slow call holds back at most this many finished ones in memory.
	window := make(chan struct{}, 4*r.opts.Concurrency+16)
	jobs := make(chan *job)
	results := make(chan *job, r.opts.Concurrency)

	var (
		mu      sync.Mutex // protects read, readErr, srcDone
		read    int
		readErr error
		srcDone bool
	)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(jobs)
		for seq := 0; ; seq++ {
			select {
			case window <- struct{}{}:
			case <-runCtx.Done():
				return
			}
			rec, err := src.Next(runCtx)
			if err != nil {
				mu.Lock()
				switch {
				case errors.Is(err, io.EOF):
					srcDone = true
				case runCtx.Err() == nil:
					readErr = fmt.Errorf("read recording: %w", err)
				}
				mu.Unlock()
				return
			}
			mu.Lock()
			read++
			mu.Unlock()
			select {
			case jobs <- &job{seq: seq, rec: rec}:
			case <-runCtx.Done():
				// Hand it to the writer unreplayed, so it counts as
				// aborted and Read = Replayed + Aborted holds.
				results <- &job{seq: seq, rec: rec}
				return
			}
		}
	})

	var limiter *rate.Limiter
	if r.opts.Rate > 0 {
		limiter = rate.NewLimiter(rate.Limit(r.opts.Rate), 1)
	}
	var workers sync.WaitGroup
	for range r.opts.Concurrency {
		workers.Go(func() {
			for j := range jobs {
				j.out = r.replayOne(runCtx, limiter, j.rec)
				results <- j
			}
		})
	}
	go func() {
		wg.Wait()
		workers.Wait()
		close(results)
	}()

	reader := func() (int, bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return read, srcDone, readErr
	}
	st, err := r.write(ctx, stop, results, window, sink, start, reader)
	st.Elapsed = time.Since(start)
	if err != nil {
		return st, err
	}
	if _, _, err := reader(); err != nil {
		return st, err
	}
	if ctx.Err() != nil {
		return st, context.Cause(ctx)
	}
	return st, nil
}

// write takes the results as they come, writes them to sink in sequence
// order and reports progress. It returns after every result was taken.
func (r *Replayer) write(ctx context.Context, stop context.CancelCauseFunc, results <-chan *job,
	window <-chan struct{}, sink record.Sink, start time.Time, reader func() (int, bool, error),
) (Stats, error) {
	var st Stats
	pending := map[int]*job{}
	next := 0
	var sinkErr error
	// Writes use a context that survives ctx: what finished before a stop
	// is still written.
	wctx := context.WithoutCancel(ctx)
	var tick <-chan time.Time
	if r.opts.Progress != nil {
		t := time.NewTicker(r.opts.ProgressEvery)
		defer t.Stop()
		tick = t.C
	}
	report := func(final bool) {
		if r.opts.Progress == nil {
			return
		}
		read, done, _ := reader()
		p := Progress{Done: st.Replayed, Errors: st.Errors, Elapsed: time.Since(start), Final: final, Total: r.opts.Total}
		if done {
			p.Total = read
		}
		if s := p.Elapsed.Seconds(); s > 0 {
			p.Rate = float64(p.Done) / s
		}
		r.opts.Progress(p)
	}
	var batch []*record.Record
	for results != nil {
		select {
		case j, ok := <-results:
			if !ok {
				results = nil
				break
			}
			pending[j.seq] = j
			batch = batch[:0]
			for {
				j, ok := pending[next]
				if !ok {
					break
				}
				delete(pending, next)
				next++
				<-window
				if j.out == nil {
					st.Aborted++
					continue
				}
				st.Replayed++
				if a := j.out.Arms[record.ArmPrimary]; a.Status < 200 || a.Status > 299 {
					st.Errors++
				}
				batch = append(batch, j.out)
			}
			if len(batch) == 0 || sinkErr != nil {
				continue
			}
			n, err := sink.Write(wctx, batch)
			st.Written += n
			if err != nil {
				sinkErr = fmt.Errorf("write replay: %w", err)
				stop(sinkErr)
			}
		case <-tick:
			report(false)
		}
	}
	st.Read, _, _ = reader()
	// Records past a gap never came back (the reader stopped before
	// handing them over); none are left in a clean finish.
	st.Aborted += len(pending)
	report(true)
	if sinkErr != nil {
		return st, sinkErr
	}
	return st, nil
}

// replayOne waits for the rate limiter and replays rec, returning the new
// record, or nil when ctx ended first.
func (r *Replayer) replayOne(ctx context.Context, limiter *rate.Limiter, rec *record.Record) *record.Record {
	if ctx.Err() != nil {
		return nil
	}
	if limiter != nil && limiter.Wait(ctx) != nil {
		// Wait fails early when the next slot lies past ctx's deadline;
		// the run ends at the deadline, not before it with every
		// remaining record aborted.
		<-ctx.Done()
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	t0 := time.Now()
	arm, err := r.target.Replay(cctx, rec)
	lat := time.Since(t0)
	if err != nil && ctx.Err() != nil {
		return nil
	}
	if err != nil {
		// The call's own deadline passed: that is the answer.
		arm.Status, arm.Reason, arm.Outputs = http.StatusGatewayTimeout, kserve.ReasonTimeout, nil
	}
	arm.LatencyMS = float64(lat.Microseconds()) / 1000
	r.m.observe(arm.Status, lat)
	if arm.Status < 200 || arm.Status > 299 {
		r.log.Debug("replayed request failed", "request_id", rec.RequestID, "status", arm.Status, "reason", arm.Reason)
	}
	return &record.Record{
		Schema:    record.SchemaVersion,
		RequestID: rec.RequestID,
		Time:      rec.Time,
		Service:   rec.Service,
		ShadowKey: rec.ShadowKey,
		Headers:   rec.Headers,
		Request:   rec.Request,
		Features:  rec.Features,
		Inputs:    rec.Inputs,
		Arms:      map[string]record.Arm{record.ArmPrimary: arm},
	}
}
