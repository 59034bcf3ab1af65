package console

import (
	"bytes"
	"encoding/json"
	"slices"
	"sync"

	"github.com/sluice-ml/sluice/internal/gateway/accesslog"
)

// DefaultErrorLogSize is how many failed requests an ErrorLog keeps when
// NewErrorLog is given 0.
const DefaultErrorLogSize = 200

// maxLine bounds a partial access-log line kept between writes; a longer
// one is dropped.
const maxLine = 64 << 10

// ErrorLog keeps the latest failed requests of the gateway in a bounded
// ring. It is an io.Writer of access-log JSON lines, so the gateway's
// access log can be teed into it (io.MultiWriter), and it implements
// ErrorsSource. It only sees what the access log samples: every failure
// with the default errors_percent of 100. It is safe for concurrent use.
type ErrorLog struct {
	mu      sync.Mutex // protects the fields below
	ring    []accesslog.Entry
	next    int    // where the next entry goes
	seen    uint64 // failures recorded in all
	partial []byte // the unfinished last line of the previous Write
}

// NewErrorLog returns an ErrorLog that keeps the latest size failures
// (DefaultErrorLogSize when size <= 0).
func NewErrorLog(size int) *ErrorLog {
	if size <= 0 {
		size = DefaultErrorLogSize
	}
	return &ErrorLog{ring: make([]accesslog.Entry, 0, size)}
}

// Write takes access-log JSON lines, possibly split across calls, and
// records the failed requests among them. Lines that do not decode are
// skipped. It never fails.
func (l *ErrorLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	data := p
	if len(l.partial) > 0 {
		// The unfinished line of the previous Write comes first.
		l.partial = append(l.partial, p...)
		data = l.partial
	}
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		l.recordLine(data[:i])
		data = data[i+1:]
	}
	// Keep the unfinished last line (copy handles data overlapping
	// partial); a line longer than maxLine is dropped.
	if len(data) > maxLine {
		data = nil
	}
	l.partial = append(l.partial[:0], data...)
	return len(p), nil
}

func (l *ErrorLog) recordLine(line []byte) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return
	}
	var e accesslog.Entry
	if err := json.Unmarshal(line, &e); err != nil || !e.IsError() {
		return
	}
	l.add(e)
}

// Record records e when it is a failed request (accesslog.Entry.IsError).
func (l *ErrorLog) Record(e accesslog.Entry) {
	if !e.IsError() {
		return
	}
	l.mu.Lock()
	l.add(e)
	l.mu.Unlock()
}

func (l *ErrorLog) add(e accesslog.Entry) {
	l.seen++
	if len(l.ring) < cap(l.ring) {
		l.ring = append(l.ring, e)
		return
	}
	l.ring[l.next] = e
	l.next = (l.next + 1) % len(l.ring)
}

// RecentErrors returns at most n of the kept failures, newest first.
func (l *ErrorLog) RecentErrors(n int) []accesslog.Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	n = min(n, len(l.ring))
	out := make([]accesslog.Entry, 0, max(n, 0))
	for i := range n {
		// The newest entry is just before next (or the last appended).
		j := (l.next - 1 - i + 2*len(l.ring)) % len(l.ring)
		if len(l.ring) < cap(l.ring) {
			j = len(l.ring) - 1 - i
		}
		out = append(out, l.ring[j])
	}
	return out
}

// ErrorsSeen is how many failures were recorded in all.
func (l *ErrorLog) ErrorsSeen() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen
}

// ErrorGroup is the failures of one service with one status and reason:
// how many, when the latest happened, and that latest one as the example.
type ErrorGroup struct {
	Service string          `json:"service"`
	Status  int             `json:"status"`
	Reason  string          `json:"reason"`
	Count   int             `json:"count"`
	Last    accesslog.Entry `json:"last"`
}

// GroupErrors groups failures (newest first, as RecentErrors returns
// them) by service, status and reason, the largest group first (the most
// recent on a tie).
func GroupErrors(errs []accesslog.Entry) []ErrorGroup {
	type key struct {
		service, reason string
		status          int
	}
	idx := map[key]int{}
	var out []ErrorGroup
	for _, e := range errs {
		k := key{e.Service, e.Reason, e.Status}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, ErrorGroup{Service: e.Service, Status: e.Status, Reason: e.Reason, Last: e})
		}
		out[i].Count++
		if e.Time.After(out[i].Last.Time) {
			out[i].Last = e
		}
	}
	slices.SortStableFunc(out, func(a, b ErrorGroup) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		return b.Last.Time.Compare(a.Last.Time)
	})
	return out
}
