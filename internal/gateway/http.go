package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluice-ml/sluice/internal/admission"
	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/jsonenc"
	"github.com/sluice-ml/sluice/internal/telemetry"
)

// The HTTP edge: ServeHTTP finds what a request asks for (a service, the
// KServe v2 proxy, /ready) and, for a service, turns the request into a
// Call, runs the pipeline (pipeline.go) and writes the answer or the error.

// ServeHTTP serves the service paths, the KServe v2 proxy (when
// configured) and GET /ready.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	st := g.state.Load()
	path := r.URL.Path
	if s, ok := st.services[serviceKey{r.Method, path}]; ok {
		g.serveService(w, r, st, s)
		return
	}
	switch {
	case path == "/ready" || path == "/healthz":
		if g.draining.Load() {
			writeError(w, "", http.StatusServiceUnavailable, ReasonDraining, "the gateway is shutting down")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ready":true}`+"\n")
	case st.proxy != nil && strings.HasPrefix(path, st.proxy.cfg.PathPrefix):
		g.serveProxy(w, r, st)
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/outcomes") && isOutcomesPath(path):
		name, _ := outcomesPath(path)
		g.serveOutcomes(w, r, name)
	case st.paths[path]:
		g.countUnknown(http.StatusMethodNotAllowed, ReasonMethodNotAllowed)
		writeError(w, "", http.StatusMethodNotAllowed, ReasonMethodNotAllowed, "method "+r.Method+" is not allowed on "+path)
	default:
		g.countUnknown(http.StatusNotFound, ReasonNotFound)
		writeError(w, "", http.StatusNotFound, ReasonNotFound, "no service at "+path)
	}
}

// countUnknown counts a request for a path or method no service serves,
// under service and route "unknown" (the path itself would be a label
// any client could grow).
func (g *Gateway) countUnknown(code int, reason string) {
	g.met.requests.WithLabelValues(routeUnknown, routeUnknown, strconv.Itoa(code), "", "", reason).Inc()
}

// serveService answers one HTTP call of service s.
func (g *Gateway) serveService(w http.ResponseWriter, r *http.Request, st *state, s *service) {
	reqID := requestID(r.Header)
	h := w.Header()
	h["X-Request-Id"] = []string{reqID}
	body := &httpBody{w: w, r: r, limit: g.opts.MaxBodyBytes}
	_, _ = g.predict(r.Context(), st, s, &Call{
		Service: s.name, RequestID: reqID, Header: r.Header, Peer: r.RemoteAddr, TLS: r.TLS, Body: body,
		Traced: func(ctx context.Context) { telemetry.TraceHeaders(ctx, h) },
		// The answer is written before the call is logged, so the log
		// has the bytes sent.
		Respond: func(a *Answer, err error) int64 {
			if err != nil {
				cw := &countingWriter{ResponseWriter: w}
				writeHTTPError(cw, reqID, err)
				return cw.n
			}
			out := appendAnswer(make([]byte, 0, 256), a)
			h["Content-Type"] = []string{"application/json"}
			h["X-Sluice-Route"] = []string{a.Route}
			h["X-Sluice-Version"] = []string{a.Version}
			n, _ := w.Write(out)
			return int64(n)
		},
	})
}

// countingWriter counts the body bytes written through it.
type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

// httpBody is a service request's JSON body, read from the connection
// when the pipeline decodes it.
type httpBody struct {
	w     http.ResponseWriter
	r     *http.Request
	limit int64
}

func (b *httpBody) decode(s *service, vals []value) (int64, error) {
	body, err := readBody(b.w, b.r, b.limit)
	if err != nil {
		return int64(len(body)), err
	}
	return int64(len(body)), s.parseBody(body, vals)
}

// readBody reads a request body of at most limit bytes. Its errors are
// *apierr.Error values: body_too_large, overloaded (the process's byte
// budget, package admission), or invalid_json for a broken stream.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body, err := readAll(http.MaxBytesReader(w, r.Body, limit), r.ContentLength)
	if err == nil {
		return body, nil
	}
	if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
		// The listener's limit (admission) may be the smaller one.
		return body, apierr.Errorf(apierr.KindResourceExhausted, ReasonBodyTooLarge, "the request body exceeds %d bytes", min(mbe.Limit, limit))
	}
	if errors.Is(err, admission.ErrOverloaded) {
		return body, apierr.Errorf(apierr.KindUnavailable, admission.ReasonOverloaded, "reading the request body: %v", err)
	}
	return body, apierr.Errorf(apierr.KindInvalid, ReasonInvalidJSON, "reading the request body: %v", err)
}

// presize bounds the buffer readAll allocates for an announced body
// before any of it arrived.
const presize = 64 << 10

// readAll is io.ReadAll with a first buffer of the size the request
// announced (size < 0: unknown), so a body whose Content-Length is known
// is read into one allocation.
func readAll(rd io.Reader, size int64) ([]byte, error) { return readAllInto(nil, rd, size) }

// readAllInto is readAll appending to b[:0] when b has room for what the
// request announced.
func readAllInto(b []byte, rd io.Reader, size int64) ([]byte, error) {
	n := 512
	if size > 0 {
		n = int(min(size, presize)) + 1 // +1: the read that finds the end
	}
	if cap(b) < n {
		b = make([]byte, 0, n)
	}
	b = b[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		m, err := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return b, err
		}
	}
}

// writeHTTPError writes err with its status, reason and the headers its
// kind calls for (WWW-Authenticate, Retry-After, X-RateLimit-Limit).
func writeHTTPError(w http.ResponseWriter, reqID string, err error) {
	code, reason := apierr.HTTPStatus(err)
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
	}
	if rl, ok := asRateLimited(err); ok {
		w.Header().Set("Retry-After", retryAfter(rl))
		w.Header().Set("X-RateLimit-Limit", strconv.FormatFloat(rl.Limit, 'g', -1, 64))
	}
	// WriteError scrubs a 5xx message of addresses and paths; the access
	// log's line keeps the detail.
	writeError(w, reqID, code, reason, err.Error())
}

// writeError writes the JSON error body every gateway error uses, with
// the request id when there is one.
func writeError(w http.ResponseWriter, reqID string, code int, reason, msg string) {
	apierr.WriteError(w, code, reason, msg, apierr.RequestID(reqID))
}

// appendAnswer appends the answer's JSON body.
func appendAnswer(b []byte, a *Answer) []byte {
	b = append(b, `{"request_id":`...)
	b = jsonenc.AppendString(b, a.RequestID)
	b = append(b, `,"service":`...)
	b = jsonenc.AppendString(b, a.Service)
	b = append(b, `,"route":`...)
	b = jsonenc.AppendString(b, a.Route)
	b = append(b, `,"model":`...)
	b = jsonenc.AppendString(b, a.Model)
	b = append(b, `,"version":`...)
	b = jsonenc.AppendString(b, a.Version)
	b = append(b, `,"source":`...)
	b = jsonenc.AppendString(b, a.Source)
	if a.Reason != "" {
		b = append(b, `,"reason":`...)
		b = jsonenc.AppendString(b, a.Reason)
	}
	b = append(b, `,"outputs":{`...)
	for i := range a.Outputs {
		o := &a.Outputs[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonenc.AppendString(b, o.Name)
		b = append(b, ':')
		if o.Array {
			b = append(b, '[')
		}
		for j, x := range o.Values {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendFloat(b, x, o.DataType)
		}
		if o.Array {
			b = append(b, ']')
		}
	}
	return append(b, "}}\n"...)
}

// maxRequestID bounds a client-supplied x-request-id.
const maxRequestID = 128

// requestID returns the request's X-Request-Id when it is sane, else a
// new random one.
func requestID(h http.Header) string {
	if vs := h["X-Request-Id"]; len(vs) > 0 {
		if id := vs[0]; id != "" && len(id) <= maxRequestID && printable(id) {
			return id
		}
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
