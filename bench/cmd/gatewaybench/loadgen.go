package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"
)

// lateThreshold is how far behind its scheduled time a request may be
// sent before it counts as a late send.
const lateThreshold = time.Millisecond

// loadSpec is one open-loop phase: Rate requests per second for Duration,
// the i-th sent at start + i/Rate whether or not earlier ones answered.
type loadSpec struct {
	URL    string
	Header http.Header
	// Body returns the i-th request's body; it must be safe for concurrent use.
	Body     func(i int) []byte
	Rate     float64
	Duration time.Duration
	// MaxInFlight bounds outstanding requests. When it is reached the
	// schedule waits: those sends are late, and their latency still counts
	// from the scheduled time.
	MaxInFlight int
	// Classify maps an answer to success and an outcome label (counted in
	// loadResult.Outcomes). Nil: 2xx is success, labelled "HTTP <code>".
	Classify func(status int, body []byte) (ok bool, label string)
}

// loadResult is what one phase measured.
type loadResult struct {
	Rate      float64 // offered, requests/s
	Scheduled int     // requests the schedule held
	Sent      int
	OK        int
	// Outcomes counts every answer and failure by label ("HTTP 200",
	// "HTTP 503 rate_limited", "timeout", ...).
	Outcomes map[string]int
	// Late counts sends more than lateThreshold behind schedule.
	Late int
	// Lag holds each send's offset from its scheduled time, sorted
	// (negative: sent early).
	Lag []time.Duration
	// Latency holds every sent request's latency, successes and failures,
	// sorted. It runs from the scheduled send time (or from the actual send
	// when that was earlier) to the end of the answer's body, so a stalled
	// schedule shows up as latency instead of being omitted.
	Latency []time.Duration
	// Service holds the same requests' latency from the actual send, sorted.
	Service []time.Duration
	// Span runs from the first scheduled send to the last completion, and
	// is at least the schedule's length (Scheduled / Rate).
	Span time.Duration
	// FirstErr is the first transport error, for the report's notes.
	FirstErr string
}

// Errors is the number of sent requests that did not succeed.
func (r *loadResult) Errors() int { return r.Sent - r.OK }

// Throughput is successful requests per second over Span.
func (r *loadResult) Throughput() float64 {
	if r.Span <= 0 {
		return 0
	}
	return float64(r.OK) / r.Span.Seconds()
}

// pct returns the q-quantile (0 < q ≤ 1) of a sorted sample by nearest
// rank, or 0 for an empty sample.
func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// merge combines phases of the same target and rate (rounds) into one
// result, as if they were one sample.
func merge(rs []loadResult) loadResult {
	var out loadResult
	out.Outcomes = map[string]int{}
	for _, r := range rs {
		out.Rate = r.Rate
		out.Scheduled += r.Scheduled
		out.Sent += r.Sent
		out.OK += r.OK
		out.Late += r.Late
		out.Span += r.Span
		out.Lag = append(out.Lag, r.Lag...)
		out.Latency = append(out.Latency, r.Latency...)
		out.Service = append(out.Service, r.Service...)
		for k, v := range r.Outcomes {
			out.Outcomes[k] += v
		}
		if out.FirstErr == "" {
			out.FirstErr = r.FirstErr
		}
	}
	slices.Sort(out.Lag)
	slices.Sort(out.Latency)
	slices.Sort(out.Service)
	return out
}

// newClient returns a keep-alive HTTP/1.1 client for one target, with
// enough idle connections for maxConns requests in flight.
func newClient(maxConns int, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        maxConns,
		MaxIdleConnsPerHost: maxConns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// sleeper sleeps with microsecond precision: Go's timers wake at best
// every millisecond when the process is idle, which at 2,000 requests/s
// would bunch sends in pairs and add up to half a millisecond of
// scheduling delay to every other request. It calls nanosleep on a thread
// locked to the calling goroutine, with the thread's timer slack set to
// 1 ns, and learns its own oversleep to wake a little early.
type sleeper struct {
	over time.Duration // running estimate of the wake-up delay
}

func newSleeper() *sleeper {
	runtime.LockOSThread()
	// PR_SET_TIMERSLACK (29): the default slack of 50 µs would be added to
	// every wake-up. Failure only costs precision.
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, 29, 1, 0)
	return &sleeper{over: 50 * time.Microsecond}
}

func (s *sleeper) close() { runtime.UnlockOSThread() }

// until sleeps until shortly before t (by the learned wake-up delay).
func (s *sleeper) until(t time.Time) {
	d := time.Until(t) - s.over
	if d <= 0 {
		return
	}
	t0 := time.Now()
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil) // EINTR only shortens the sleep
	o := time.Since(t0) - d
	s.over = min(max((7*s.over+o)/8, 0), 500*time.Microsecond)
}

// sample is one request's record.
type sample struct {
	sent     bool
	lag      time.Duration // sent − scheduled
	latency  time.Duration
	service  time.Duration
	ok       bool
	label    string
	transErr string
}

// runLoad runs one open-loop phase against spec.URL, which must be rc's
// host, and returns what it measured. It stops sending when ctx ends, and
// returns once every sent request has finished (each is bounded by rc's
// timeout).
func runLoad(ctx context.Context, rc *rawClient, spec loadSpec) loadResult {
	head, err := requestHead(spec.URL, spec.Header)
	if err != nil {
		return loadResult{Rate: spec.Rate, Outcomes: map[string]int{}, FirstErr: err.Error()}
	}
	n := max(int(math.Round(spec.Rate*spec.Duration.Seconds())), 1)
	step := float64(time.Second) / spec.Rate
	classify := spec.Classify
	if classify == nil {
		classify = func(status int, _ []byte) (bool, string) {
			return status >= 200 && status < 300, fmt.Sprintf("HTTP %d", status)
		}
	}
	inflight := max(spec.MaxInFlight, 1)
	samples := make([]sample, n)
	sem := make(chan struct{}, inflight)
	var wg sync.WaitGroup
	var lastMu sync.Mutex
	var last time.Time // last completion; guarded by lastMu

	sl := newSleeper()
	start := time.Now().Add(5 * time.Millisecond)
send:
	for i := range n {
		due := start.Add(time.Duration(float64(i) * step))
		sl.until(due)
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break send
		}
		sentAt := time.Now()
		samples[i].sent = true
		samples[i].lag = sentAt.Sub(due)
		from := due
		if sentAt.Before(due) {
			from = sentAt
		}
		wg.Add(1)
		go func(s *sample, i int, from, sentAt time.Time) {
			defer wg.Done()
			defer func() { <-sem }()
			s.ok, s.label, s.transErr = doRequest(ctx, rc, head, &spec, i, classify)
			done := time.Now()
			s.latency, s.service = done.Sub(from), done.Sub(sentAt)
			lastMu.Lock()
			if done.After(last) {
				last = done
			}
			lastMu.Unlock()
		}(&samples[i], i, from, sentAt)
	}
	sl.close()
	wg.Wait()

	res := loadResult{Rate: spec.Rate, Scheduled: n, Outcomes: map[string]int{}}
	for i := range samples {
		s := &samples[i]
		if !s.sent {
			continue
		}
		res.Sent++
		if s.ok {
			res.OK++
		}
		if s.lag > lateThreshold {
			res.Late++
		}
		res.Outcomes[s.label]++
		if s.transErr != "" && res.FirstErr == "" {
			res.FirstErr = s.transErr
		}
		res.Lag = append(res.Lag, s.lag)
		res.Latency = append(res.Latency, s.latency)
		res.Service = append(res.Service, s.service)
	}
	slices.Sort(res.Lag)
	slices.Sort(res.Latency)
	slices.Sort(res.Service)
	res.Span = time.Duration(float64(n) * step)
	if d := last.Sub(start); d > res.Span {
		res.Span = d
	}
	return res
}

// doRequest sends the i-th request and reads the whole answer.
func doRequest(ctx context.Context, rc *rawClient, head []byte, spec *loadSpec, i int, classify func(int, []byte) (bool, string)) (ok bool, label, transErr string) {
	status, body, err := rc.post(ctx, head, spec.Body(i))
	if err != nil {
		kind := errorKind(err)
		if status != 0 {
			kind = "body " + kind
		}
		return false, kind, err.Error()
	}
	ok, label = classify(status, body)
	return ok, label, ""
}

// errorKind names a transport error for the outcome counts.
func errorKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	default:
		return "transport error"
	}
}
