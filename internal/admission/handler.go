package admission

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// Handler wraps next with listener's limits and the process budget b:
//
//   - more header fields than l.MaxHeaderCount: 431 too_many_headers;
//   - a Content-Length over l.MaxBodyBytes: 413 body_too_large (see
//     HandlerAnswering for another answer), nothing
//     of the body kept; a body at most maxDrainBytes over the limit is
//     read and discarded first (for at most drainTimeout), so that a
//     client that sends the whole body before reading, as Triton's Python
//     client does, sees the answer rather than a broken pipe; the
//     connection is closed after the answer;
//   - a Content-Length the budget cannot take now: 503 overloaded with
//     Retry-After: 1, the body unread; otherwise the length is reserved
//     up front;
//   - a body of unknown length (chunked, or HTTP/2 without
//     content-length): r.Body is wrapped so that each read is charged to
//     the budget as it arrives, and a read past l.MaxBodyBytes or past the
//     budget fails with an error matching ErrBodyTooLarge (and
//     *http.MaxBytesError) or ErrOverloaded; next's own body reader
//     answers those.
//
// Everything charged for a request is released when next returns, panics
// included. Requests without a body (GET, HEAD, Content-Length: 0) only
// pay the header check. A request with a Content-Encoding also carries an
// account in its context for Charge, since decoding can grow it beyond
// its wire bytes.
//
// listener names the port in the rejections metric. b and m may be nil:
// an unlimited budget, unregistered metrics.
func Handler(listener string, l Limits, b *Budget, m *Metrics, next http.Handler) http.Handler {
	return HandlerAnswering(listener, l, b, m, nil, next)
}

// TooLarge writes the answer to a request whose Content-Length (length)
// is over the listener's limit (limit). The handler has already drained
// what it drains and set Connection: close.
type TooLarge func(w http.ResponseWriter, r *http.Request, length, limit int64)

// HandlerAnswering is Handler with the answer to a Content-Length over
// the limit written by tooLarge (nil: 413 body_too_large), for a listener
// whose protocol answers it otherwise (the KServe HTTP port answers 400,
// as Triton does).
func HandlerAnswering(listener string, l Limits, b *Budget, m *Metrics, tooLarge TooLarge, next http.Handler) http.Handler {
	if b == nil {
		b = NewBudget(0, nil)
	}
	if tooLarge == nil {
		tooLarge = answerTooLarge
	}
	return &handler{limits: l, budget: b, rej: orUnregistered(m).forListener(listener), tooLarge: tooLarge, next: next}
}

// answerTooLarge is the default TooLarge: 413 body_too_large.
func answerTooLarge(w http.ResponseWriter, _ *http.Request, length, limit int64) {
	apierr.WriteError(w, http.StatusRequestEntityTooLarge, ReasonBodyTooLarge,
		"request body of "+strconv.FormatInt(length, 10)+" bytes exceeds the limit of "+strconv.FormatInt(limit, 10)+" bytes")
}

type handler struct {
	limits   Limits
	budget   *Budget
	rej      *rejectCounters
	tooLarge TooLarge
	next     http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if limit := h.limits.MaxHeaderCount; limit > 0 && tooManyHeaders(r.Header, limit) {
		h.rej.tooManyHeaders.Inc()
		apierr.WriteError(w, http.StatusRequestHeaderFieldsTooLarge, ReasonTooManyHeaders,
			"request has more than "+strconv.Itoa(limit)+" header fields")
		return
	}
	cl := r.ContentLength
	if limit := h.limits.MaxBodyBytes; limit > 0 && cl > limit {
		h.rej.bodyTooLarge.Inc()
		if cl-limit <= maxDrainBytes {
			drain(w, r, cl)
		}
		// The body is not used: have the server close the connection
		// rather than drain what is left.
		w.Header().Set("Connection", "close")
		h.tooLarge(w, r, cl, limit)
		return
	}
	if cl > 0 {
		if !h.budget.TryAcquire(cl) {
			h.rej.overloaded.Inc()
			writeOverloaded(w)
			return
		}
		defer h.budget.Release(cl)
	}
	unknown := cl < 0 && r.Body != nil && r.Body != http.NoBody
	if _, encoded := r.Header["Content-Encoding"]; !unknown && !encoded {
		// The common case: nothing to wrap, nothing allocated.
		h.next.ServeHTTP(w, r)
		return
	}
	h.serveAccounted(w, r, unknown)
}

// serveAccounted serves a request whose memory can grow as it is read: a
// body of unknown length (wrap is true) or an encoded one. Its account is
// released when next returns.
func (h *handler) serveAccounted(w http.ResponseWriter, r *http.Request, wrap bool) {
	a := &account{b: h.budget, rej: h.rej}
	defer a.close()
	r = r.WithContext(context.WithValue(r.Context(), accountKey{}, a))
	if wrap {
		rc := r.Body
		if limit := h.limits.MaxBodyBytes; limit > 0 {
			// MaxBytesReader also tells the server to close the connection
			// once the limit is hit, but only given the server's own writer.
			rc = http.MaxBytesReader(innermost(w), rc, limit)
		}
		r.Body = &body{rc: rc, acct: a, limit: h.limits.MaxBodyBytes}
	}
	h.next.ServeHTTP(w, r)
}

// Draining an oversized body: at most maxDrainBytes past the limit, for at
// most drainTimeout. Discarding costs no memory; the bounds keep a client
// from holding a connection reader for long.
const (
	maxDrainBytes = 64 << 20
	drainTimeout  = 30 * time.Second
)

// drain reads and discards up to n bytes of r's body within drainTimeout.
func drain(w http.ResponseWriter, r *http.Request, n int64) {
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(drainTimeout)) != nil {
		return // no deadline possible: do not read unbounded in time
	}
	_, _ = io.CopyN(io.Discard, r.Body, n)
	_ = rc.SetReadDeadline(time.Time{})
}

// tooManyHeaders reports whether hdr holds more than limit fields, each
// value of a repeated field counting once.
func tooManyHeaders(hdr http.Header, limit int) bool {
	if len(hdr) > limit {
		return true
	}
	n := 0
	for _, v := range hdr {
		n += len(v)
		if n > limit {
			return true
		}
	}
	return false
}

// accountKey is the context key of a request's *account.
type accountKey struct{}

// account holds what one request charged to the budget beyond its
// Content-Length reservation.
type account struct {
	b   *Budget
	rej *rejectCounters

	mu       sync.Mutex // protects charged, closed, rejected
	charged  int64
	closed   bool // the request is over: nothing more may be charged
	rejected bool // a rejection was counted for this request
}

// charge takes n bytes from the budget for the rest of the request, or
// returns ErrOverloaded. The bytes are a body's of unknown length or a
// decoded body's growth: they may not take the budget's reserve.
func (a *account) charge(n int64) error { return a.take(n, true) }

// take is charge; bulk bytes may not take the budget's reserve (a small
// response's may).
func (a *account) take(n int64, bulk bool) error {
	if n <= 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || !a.b.acquire(n, bulk) {
		if !a.rejected {
			a.rejected = true
			a.rej.overloaded.Inc()
		}
		return ErrOverloaded
	}
	a.charged += n
	return nil
}

// countTooLarge counts one body_too_large rejection for the request.
func (a *account) countTooLarge() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.rejected {
		a.rejected = true
		a.rej.bodyTooLarge.Inc()
	}
}

// close releases everything charged; later charges fail.
func (a *account) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.b.Release(a.charged)
	a.charged = 0
	a.closed = true
}

// Charge charges n more bytes to the request whose context is ctx, until
// Handler is done with it: memory the handler holds beyond the wire bytes
// admission counted, such as the growth of a decompressed body over its
// compressed size. It returns ErrOverloaded when the budget cannot take
// them; the caller then answers 503 overloaded.
//
// Handler puts an account in the context of requests whose memory can
// grow as they are read: a Content-Encoding or a body of unknown length.
// For other contexts (a plain body of known length, whose Content-Length
// was reserved up front, or a context that did not come through Handler)
// Charge does nothing and returns nil.
func Charge(ctx context.Context, n int64) error {
	a, ok := ctx.Value(accountKey{}).(*account)
	if !ok {
		return nil
	}
	return a.charge(n)
}

// body charges every chunk read to the request's account.
type body struct {
	rc    io.ReadCloser
	acct  *account
	limit int64
	err   error // sticky: once refused, every later read fails the same way
}

func (b *body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.rc.Read(p)
	if n > 0 {
		if cerr := b.acct.charge(int64(n)); cerr != nil {
			b.err = cerr
			return 0, cerr
		}
	}
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			b.acct.countTooLarge()
			b.err = &BodyTooLargeError{Limit: b.limit}
			return n, b.err
		}
	}
	return n, err
}

func (b *body) Close() error { return b.rc.Close() }

// innermost unwraps response writer wrappers (those with an Unwrap method,
// as http.ResponseController expects) down to the server's own.
func innermost(w http.ResponseWriter) http.ResponseWriter {
	for range 16 { // wrappers do not nest deeper; the bound guards a cycle
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	return w
}

// writeOverloaded answers 503 overloaded with Retry-After: 1: the refusal
// is about this moment, not about the request.
func writeOverloaded(w http.ResponseWriter) {
	apierr.WriteError(w, http.StatusServiceUnavailable, ReasonOverloaded, ErrOverloaded.Error())
}
