package servingapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/admission"
	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/jsonenc"
)

// DefaultMaxBodyBytes bounds a request body when HandlerOptions leaves it 0.
const DefaultMaxBodyBytes = config.DefaultFeatureMaxBodyBytes

// DefaultMaxEntityRows bounds the entity rows of one /get-online-features
// request when HandlerOptions leaves it 0. Online reads serve one
// prediction or one ranking call: Feast users send one to a few thousand
// entity rows (candidates to rank); 10,000 leaves room for the largest of
// those, while a request over it is a batch job that belongs to historical
// retrieval or materialization. 10,000 rows of 50 features decode to about
// 50 MB, not the gigabytes an unbounded request can take.
const DefaultMaxEntityRows = 10_000

// healthTimeout bounds the store ping of GET /health.
const healthTimeout = 2 * time.Second

// Materializer runs materializations for the /materialize endpoints. Its
// reports are sent back as JSON.
type Materializer interface {
	// Materialize loads views (all when empty) over [start, end].
	Materialize(ctx context.Context, start, end time.Time, views []string) (any, error)
	// MaterializeIncremental loads views from their watermarks to end.
	MaterializeIncremental(ctx context.Context, end time.Time, views []string) (any, error)
}

// HandlerOptions configure the HTTP handler. The zero value is usable.
type HandlerOptions struct {
	// MaxBodyBytes bounds a request body; larger ones get 413. Default
	// DefaultMaxBodyBytes (16 MiB).
	MaxBodyBytes int64
	// MaxEntityRows bounds the entity rows of a /get-online-features
	// request; more are answered 413 too_many_entity_rows, found while
	// decoding so that no more than this many values are ever built.
	// Default DefaultMaxEntityRows; negative means no limit.
	MaxEntityRows int
	// Materializer serves /materialize and /materialize-incremental;
	// nil answers them 501.
	Materializer Materializer
	// Metrics, when set, is served on GET /metrics.
	Metrics http.Handler
}

// Handler is the feature server's HTTP edge, with Feast's JSON shapes.
type Handler struct {
	s       *serving.Server
	opts    HandlerOptions
	logger  *slog.Logger
	metrics *httpMetrics
	mux     *http.ServeMux
	// outBufs holds /get-online-features response buffers (*[]byte).
	outBufs sync.Pool
}

// NewHandler returns the HTTP handler for s: POST /get-online-features,
// /push, /write-to-online-store, /materialize and /materialize-incremental, GET /health and, with
// opts.Metrics, GET /metrics. A nil logger discards; a nil registerer
// leaves the request metrics unregistered.
func NewHandler(s *serving.Server, opts HandlerOptions, logger *slog.Logger, reg prometheus.Registerer) *Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	switch {
	case opts.MaxEntityRows == 0:
		opts.MaxEntityRows = DefaultMaxEntityRows
	case opts.MaxEntityRows < 0:
		opts.MaxEntityRows = math.MaxInt
	}
	h := &Handler{s: s, opts: opts, logger: edgeLogger(logger), metrics: newHTTPMetrics(reg), mux: http.NewServeMux()}
	h.outBufs.New = func() any { return new([]byte) }
	h.mux.HandleFunc("POST /get-online-features", h.handleGet)
	h.mux.HandleFunc("POST /push", h.handlePush)
	h.mux.HandleFunc("POST /write-to-online-store", h.handleWrite)
	h.mux.HandleFunc("POST /materialize", h.handleMaterialize)
	h.mux.HandleFunc("POST /materialize-incremental", h.handleMaterializeIncremental)
	h.mux.HandleFunc("GET /health", h.handleHealth)
	if opts.Metrics != nil {
		h.mux.Handle("GET /metrics", opts.Metrics)
	}
	return h
}

// ServeHTTP routes the request, turns a panic into a 500 and records the
// request metrics.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		if p := recover(); p != nil {
			if err, ok := p.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				panic(p)
			}
			h.logger.Error("handler panicked", "method", r.Method, "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
			if !sw.wrote {
				writeErrorBody(sw, http.StatusInternalServerError, serving.ReasonInternal, "internal error")
			}
		}
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		h.metrics.httpReqs.WithLabelValues(route, strconv.Itoa(sw.status())).Inc()
		h.metrics.httpDur.WithLabelValues(route).Observe(time.Since(start).Seconds())
	}()
	if _, pattern := h.mux.Handler(r); pattern == "" {
		writeErrorBody(sw, http.StatusNotFound, apierr.ReasonNotFound, "no endpoint "+r.Method+" "+r.URL.Path)
		return
	}
	h.mux.ServeHTTP(sw, r)
}

type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote, w.code = true, code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) status() int {
	if !w.wrote {
		return http.StatusOK
	}
	return w.code
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// statusOf maps an error to its HTTP status and reason: wire's mapping,
// plus the online store's outage, which materialization reports as a
// plain wrapped error rather than an *apierr.Error.
func statusOf(err error) (int, string) {
	if _, ok := errors.AsType[*apierr.Error](err); !ok && errors.Is(err, online.ErrUnavailable) {
		if _, tooLarge := errors.AsType[*http.MaxBytesError](err); !tooLarge {
			return http.StatusServiceUnavailable, serving.ReasonStoreUnavailable
		}
	}
	return apierr.HTTPStatus(err)
}

func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code, reason := statusOf(err)
	if code >= 500 {
		lvl := h.logger.Error
		if code == http.StatusServiceUnavailable {
			lvl = h.logger.Warn
		}
		lvl("request failed", "path", r.URL.Path, "status", code, "reason", reason, "err", err)
	} else {
		h.logger.Debug("request rejected", "path", r.URL.Path, "status", code, "reason", reason, "err", err)
	}
	writeErrorBody(w, code, reason, publicMessage(code, reason, err))
}

// publicMessage is the message of err that a client may see. A request
// error (4xx) says what was wrong with the request, all of it. A server
// error (5xx) keeps only its own message, not its cause: causes carry
// store addresses ("dial tcp 10.0.0.7:6379: i/o timeout"), file paths and
// library internals, which the log line keeps and the client has no use
// for. What is left is scrubbed of addresses and absolute paths once more.
func publicMessage(code int, reason string, err error) string {
	if code < 500 {
		return err.Error()
	}
	msg := ""
	if ie, ok := errors.AsType[*apierr.Error](err); ok {
		msg = ie.Msg
	}
	if reason == serving.ReasonStoreUnavailable && !strings.Contains(msg, online.ErrUnavailable.Error()) {
		if msg == "" {
			msg = online.ErrUnavailable.Error()
		} else {
			msg += ": " + online.ErrUnavailable.Error()
		}
	}
	if msg == "" {
		switch code {
		case http.StatusGatewayTimeout:
			msg = "the request did not finish within its deadline"
		case http.StatusServiceUnavailable:
			msg = "service unavailable"
		default:
			msg = "internal error"
		}
	}
	return scrub(msg)
}

var (
	// addrPattern matches network addresses: IPv4 with an optional port,
	// bracketed IPv6 with one, host:port. It is broader than package
	// scrub's (which apierr.WriteError applies after it): any host:port,
	// not only one after a dial or lookup verb, since the feature
	// server's messages name store endpoints in free text.
	addrPattern = regexp.MustCompile(`\[[0-9A-Fa-f:.%]+\](:\d+)?|\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b|\b[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?:\d{2,5}\b`)
	// pathPattern matches an absolute path after a separator.
	pathPattern = regexp.MustCompile(`(^|[\s'"(=])/[^\s'"():,]+`)
)

// scrub replaces network addresses and absolute paths in msg.
func scrub(msg string) string {
	msg = addrPattern.ReplaceAllString(msg, "<address>")
	return pathPattern.ReplaceAllString(msg, "${1}<path>")
}

// writeErrorBody writes the JSON error body (apierr.WriteError); an
// event_timestamp_too_old error also carries Feast-style
// "feature_stale_reason".
func writeErrorBody(w http.ResponseWriter, code int, reason, msg string) {
	if reason == serving.ReasonEventTimestampTooOld {
		apierr.WriteError(w, code, reason, msg, apierr.Field("feature_stale_reason", reason))
		return
	}
	apierr.WriteError(w, code, reason, msg)
}

// writeReport answers 200 with v as one line of JSON (a push's or a
// materialization's report), or the error marshalling it.
func (h *Handler) writeReport(w http.ResponseWriter, r *http.Request, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, append(b, '\n'))
}

// writeJSON writes b, a whole JSON body, in one write. Its length goes in
// Content-Length, so that a body over net/http's 2 KiB buffer is not sent
// chunked (a chunk header per write, decoded by the client).
func writeJSON(w http.ResponseWriter, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b) //nolint:gosec // G705: JSON sent as application/json
}

// readJSON decodes the body into v, numbers kept as json.Number.
func (h *Handler) readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	if err != nil {
		if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
			// The listener's limit (admission) may be the smaller one.
			return apierr.Errorf(apierr.KindResourceExhausted, apierr.ReasonBodyTooLarge, "request body is larger than %d bytes", min(mbe.Limit, h.opts.MaxBodyBytes))
		}
		if errors.Is(err, admission.ErrOverloaded) {
			return apierr.Errorf(apierr.KindUnavailable, apierr.ReasonOverloaded, "read request body: %v", err)
		}
		return invalidf(serving.ReasonInvalidRequest, "read request body: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return invalidf(apierr.ReasonInvalidJSON, "request body is not valid JSON for this endpoint: %v", err)
	}
	if dec.More() {
		return invalidf(apierr.ReasonInvalidJSON, "request body has data after the JSON object")
	}
	return nil
}

// getRequest is the body of POST /get-online-features (Feast's
// GetOnlineFeaturesRequest; unknown fields are ignored, as Feast's client
// may send more).
type getRequest struct {
	Features         []string                   `json:"features"`
	FeatureService   string                     `json:"feature_service"`
	Entities         map[string]json.RawMessage `json:"entities"`
	FullFeatureNames bool                       `json:"full_feature_names"`
	EventTimestamp   *string                    `json:"event_timestamp"`
}

func (h *Handler) handleGet(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	resp, err := h.getOnline(w, r)
	h.s.ObserveRead(start, err)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	bp := h.outBufs.Get().(*[]byte)
	b := appendResponse((*bp)[:0], resp)
	h.s.Release(resp)
	writeJSON(w, b)
	if cap(b) <= maxPooledOut {
		*bp = b[:0]
		h.outBufs.Put(bp)
	}
}

// maxPooledOut bounds the response buffers kept for reuse: 100 entity
// rows of 50 features take about 250 KiB.
const maxPooledOut = 4 << 20

func (h *Handler) getOnline(w http.ResponseWriter, r *http.Request) (*serving.Response, error) {
	var req getRequest
	if err := h.readJSON(w, r, &req); err != nil {
		return nil, err
	}
	p, err := h.s.Plan(req.Features, req.FeatureService, req.FullFeatureNames)
	if err != nil {
		return nil, err
	}
	var ets *time.Time
	if req.EventTimestamp != nil {
		t, err := serving.ParseTime(*req.EventTimestamp)
		if err != nil {
			return nil, invalidf(serving.ReasonInvalidRequest, "event_timestamp: %v", err)
		}
		ets = &t
	}
	ents, err := decodeEntities(p, req.Entities, h.opts.MaxEntityRows)
	if err != nil {
		return nil, err
	}
	return h.s.Read(r.Context(), p, ents, ets)
}

// decodeEntities converts the JSON entity columns with the join keys'
// types. Columns the plan does not know are kept (empty) so the read
// reports them as unknown. A column is decoded token by token and
// refused at its (maxRows+1)th value, so a request with millions of
// entity ids costs its body and no more.
func decodeEntities(p serving.Plan, raw map[string]json.RawMessage, maxRows int) (map[string][]feature.Value, error) {
	out := make(map[string][]feature.Value, len(raw))
	for name, msg := range raw {
		kind, isKey := p.KeyKind(name)
		if t, isReq := p.RequestField(name); !isKey && isReq {
			vals, err := decodeRequestColumn(name, msg, t, maxRows)
			if err != nil {
				return nil, err
			}
			out[name] = vals
			continue
		}
		if !isKey {
			out[name] = nil
			continue
		}
		vals, err := decodeEntityColumn(name, msg, kind, maxRows)
		if err != nil {
			return nil, err
		}
		out[name] = vals
	}
	return out, nil
}

// decodeEntityColumn decodes one entity column, a JSON list of scalars of
// kind, refusing it at its (maxRows+1)th value.
func decodeEntityColumn(name string, msg json.RawMessage, kind feature.Kind, maxRows int) ([]feature.Value, error) {
	if vals, ok := scanKeyColumn(msg, kind, maxRows); ok {
		return vals, nil
	}
	return decodeEntityTokens(name, msg, kind, maxRows)
}

// decodeEntityTokens is decodeEntityColumn through the JSON tokenizer,
// for every column scanKeyColumn leaves alone.
func decodeEntityTokens(name string, msg json.RawMessage, kind feature.Kind, maxRows int) ([]feature.Value, error) {
	notList := func() error {
		return invalidf(serving.ReasonInvalidEntityValue, "entity key '%s': want a list of values, one per entity row", name)
	}
	dec := json.NewDecoder(bytes.NewReader(msg))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, notList()
	}
	var vals []feature.Value
	for i := 0; dec.More(); i++ {
		if i >= maxRows {
			return nil, apierr.Errorf(apierr.KindResourceExhausted, serving.ReasonTooManyEntityRows,
				"entity key '%s' has more than %d values: a request may read at most %d entity rows; split it into several requests", name, maxRows, maxRows)
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, notList()
		}
		var v feature.Value
		if _, nested := tok.(json.Delim); nested {
			err = errors.New("a list or an object is not a key value")
		} else {
			v, err = serving.ToValue(tok, feature.Type{Kind: kind})
		}
		if err == nil && v.Null {
			err = errors.New("null")
		}
		if err != nil {
			return nil, invalidf(serving.ReasonInvalidEntityValue, "entity key '%s' value %d: %s key: %v", name, i, kind, err)
		}
		if vals == nil {
			vals = make([]feature.Value, 0, min(maxRows, 64))
		}
		vals = append(vals, v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, notList()
	}
	if vals == nil {
		vals = []feature.Value{}
	}
	return vals, nil
}

// scanKeyColumn decodes the common entity columns without the JSON
// tokenizer, which allocates per token: a list of integers for an Int32
// or Int64 key, or of plain ASCII strings (no escapes) for a String key,
// of at most maxRows values. Anything else, valid or not, is left to
// decodeEntityColumn's token decoder (ok false), which then answers
// exactly as it always has, errors included. msg is valid JSON (the body
// decoded).
func scanKeyColumn(msg []byte, kind feature.Kind, maxRows int) (vals []feature.Value, ok bool) {
	isInt := kind == feature.KindInt32 || kind == feature.KindInt64
	if !isInt && kind != feature.KindString {
		return nil, false
	}
	i := skipSpace(msg, 0)
	if i >= len(msg) || msg[i] != '[' {
		return nil, false
	}
	i = skipSpace(msg, i+1)
	if i < len(msg) && msg[i] == ']' {
		return []feature.Value{}, skipSpace(msg, i+1) == len(msg)
	}
	vals = make([]feature.Value, 0, min(maxRows, bytes.Count(msg, []byte{','})+1))
	for {
		if len(vals) >= maxRows {
			return nil, false
		}
		var v feature.Value
		var next int
		if isInt {
			v.I64, next, ok = scanKeyInt(msg, i, kind)
		} else {
			v.S, next, ok = scanKeyString(msg, i)
		}
		if !ok {
			return nil, false
		}
		i = next
		vals = append(vals, v)
		i = skipSpace(msg, i)
		if i >= len(msg) {
			return nil, false
		}
		switch msg[i] {
		case ',':
			i = skipSpace(msg, i+1)
		case ']':
			return vals, skipSpace(msg, i+1) == len(msg)
		default:
			return nil, false
		}
	}
}

// scanKeyInt scans the JSON integer at msg[i:] for an Int32 or Int64
// key: its value and the index after it; ok false for anything else (a
// fraction, an exponent, leading zeros, out of the kind's range).
func scanKeyInt(msg []byte, i int, kind feature.Kind) (n int64, next int, ok bool) {
	j := i
	if j < len(msg) && msg[j] == '-' {
		j++
	}
	digits := j
	for j < len(msg) && msg[j] >= '0' && msg[j] <= '9' {
		j++
	}
	// JSON's integers: no leading zeros, no fraction or exponent.
	if j == digits || j-digits > 1 && msg[digits] == '0' {
		return 0, 0, false
	}
	n, err := strconv.ParseInt(string(msg[i:j]), 10, 64)
	if err != nil || kind == feature.KindInt32 && (n < math.MinInt32 || n > math.MaxInt32) {
		return 0, 0, false
	}
	return n, j, true
}

// scanKeyString scans the JSON string at msg[i:] when it is plain ASCII
// without escapes: its value and the index after its closing quote; ok
// false for anything else.
func scanKeyString(msg []byte, i int) (s string, next int, ok bool) {
	if i >= len(msg) || msg[i] != '"' {
		return "", 0, false
	}
	j := i + 1
	for j < len(msg) && msg[j] != '"' {
		if c := msg[j]; c < 0x20 || c >= 0x80 || c == '\\' {
			return "", 0, false
		}
		j++
	}
	if j >= len(msg) {
		return "", 0, false
	}
	return string(msg[i+1 : j]), j + 1, true
}

// skipSpace returns the index of the first non-space byte of b at or
// after i (JSON's whitespace).
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// appendResponse appends resp as Feast's JSON:
// {"metadata":{"feature_names":[…]},"results":[{"values":[…],"statuses":[…],"event_timestamps":[…]},…]}.
func appendResponse(b []byte, resp *serving.Response) []byte {
	b = append(b, `{"metadata":{"feature_names":[`...)
	for i, n := range resp.FeatureNames {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonenc.AppendHTMLSafeString(b, n)
	}
	b = append(b, `]},"results":[`...)
	// The columns of one view repeat its rows' event timestamps: each
	// row's last one is formatted once and copied after that.
	var memoStack [16]tsMemo
	var memo []tsMemo
	if len(resp.Results) > 0 {
		if n := len(resp.Results[0].EventTimestamps); n <= len(memoStack) {
			memo = memoStack[:n]
		} else {
			memo = make([]tsMemo, n)
		}
	}
	var prev columnText
	for i := range resp.Results {
		c := &resp.Results[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"values":[`...)
		b = appendValues(b, resp.Types[i], c.Values)
		b = append(b, `],"statuses":[`...)
		b = prev.appendStatuses(b, c.Statuses)
		b = append(b, `],"event_timestamps":[`...)
		b = prev.appendTimestamps(b, c.EventTimestamps, memo)
		b = append(b, "]}"...)
	}
	return append(b, "]}\n"...)
}

// tsMemo is one row's last formatted event timestamp, quoted.
type tsMemo struct {
	t time.Time
	n uint8 // length of s; 0: nothing kept yet
	s [32]byte
}

// append appends ts quoted, copying the kept text when ts is the kept
// instant (AppendTimestamp writes equal instants alike, in UTC).
func (m *tsMemo) append(b []byte, ts time.Time) []byte {
	if m.n > 0 && m.t.Equal(ts) {
		return append(b, m.s[:m.n]...)
	}
	start := len(b)
	b = append(b, '"')
	b = serving.AppendTimestamp(b, ts)
	b = append(b, '"')
	if l := len(b) - start; l <= len(m.s) {
		m.t, m.n = ts, uint8(l)
		copy(m.s[:], b[start:])
	} else {
		m.n = 0
	}
	return b
}

// quotedStatuses are the statuses' JSON strings.
var quotedStatuses = func() (q [serving.StatusOutsideMaxAge + 1]string) {
	for i := range q {
		q[i] = `"` + serving.Status(i).String() + `"`
	}
	return q
}()

// quotedStatus returns st's name as a JSON string.
func quotedStatus(st serving.Status) string {
	if int(st) < len(quotedStatuses) {
		return quotedStatuses[st]
	}
	return quotedStatuses[serving.StatusInvalid]
}

// appendValues appends a column of type t's values, comma-separated, as
// appendValue writes each; scalar number columns, the common case, skip
// its per-value type switch.
func appendValues(b []byte, t feature.Type, vals []feature.Value) []byte {
	if !t.List {
		switch t.Kind {
		case feature.KindFloat32, feature.KindFloat64:
			bits := 64
			if t.Kind == feature.KindFloat32 {
				bits = 32
			}
			for j := range vals {
				if j > 0 {
					b = append(b, ',')
				}
				if vals[j].Null {
					b = append(b, "null"...)
				} else {
					b = appendFloat(b, vals[j].F64, bits)
				}
			}
			return b
		case feature.KindInt32, feature.KindInt64:
			for j := range vals {
				if j > 0 {
					b = append(b, ',')
				}
				if vals[j].Null {
					b = append(b, "null"...)
				} else {
					b = strconv.AppendInt(b, vals[j].I64, 10)
				}
			}
			return b
		default:
		}
	}
	for j := range vals {
		if j > 0 {
			b = append(b, ',')
		}
		b = appendValue(b, t, &vals[j])
	}
	return b
}

// appendValue appends v as JSON: numbers, strings, booleans, base64
// bytes, whole seconds since the epoch for UnixTimestamp (as Feast
// writes it), arrays for lists, null for null and for floats JSON cannot
// carry (NaN, ±Inf).
func appendValue(b []byte, t feature.Type, v *feature.Value) []byte {
	if v.Null {
		return append(b, "null"...)
	}
	if !t.List {
		return appendScalar(b, t.Kind, v)
	}
	return appendList(b, t.Kind, v)
}

// appendScalar appends the non-null scalar v of kind k as JSON.
func appendScalar(b []byte, k feature.Kind, v *feature.Value) []byte {
	switch k {
	case feature.KindInt32, feature.KindInt64:
		return strconv.AppendInt(b, v.I64, 10)
	case feature.KindFloat32:
		return appendFloat(b, v.F64, 32)
	case feature.KindFloat64:
		return appendFloat(b, v.F64, 64)
	case feature.KindString:
		return jsonenc.AppendHTMLSafeString(b, v.S)
	case feature.KindBytes:
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, v.B)
		return append(b, '"')
	case feature.KindBool:
		return strconv.AppendBool(b, v.Bool)
	case feature.KindUnixTimestamp:
		// Whole seconds, as Feast's server writes its
		// unix_timestamp_val (an int64 of seconds) in JSON.
		return strconv.AppendInt(b, time.Unix(0, v.I64).Unix(), 10)
	default:
		return append(b, "null"...)
	}
}

// appendList appends the non-null list v of element kind k as a JSON
// array.
func appendList(b []byte, k feature.Kind, v *feature.Value) []byte {
	b = append(b, '[')
	switch k {
	case feature.KindInt32, feature.KindInt64:
		for i, x := range v.I64s {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, x, 10)
		}
	case feature.KindFloat32:
		for i, x := range v.F32s {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendFloat(b, float64(x), 32)
		}
	case feature.KindFloat64:
		for i, x := range v.F64s {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendFloat(b, x, 64)
		}
	case feature.KindString:
		for i, x := range v.Ss {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonenc.AppendHTMLSafeString(b, x)
		}
	case feature.KindBytes:
		for i, x := range v.Ss {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, []byte(x))
			b = append(b, '"')
		}
	case feature.KindBool:
		for i, x := range v.Bools {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendBool(b, x)
		}
	default: // no other list element types exist
	}
	return append(b, ']')
}

// appendFloat appends f as the shortest decimal that reads back as the
// same float of the given bits, and always as a JSON float: a whole
// number keeps a ".0" (1 is written 1.0, as Feast's own server writes
// it), because JSON readers that type numbers by their spelling (Python's
// json, and so Feast's remote online store) read "1" as an integer and
// then refuse it as a float feature. NaN and ±Inf, which JSON cannot
// carry, are null.
func appendFloat(b []byte, f float64, bits int) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	start := len(b)
	switch {
	case bits == 32:
		// Whole numbers included: jsonenc's path writes them as fast.
		b = jsonenc.AppendFloat32(b, float32(f))
	case f == math.Trunc(f) && f > -1e6 && f < 1e6 && (f != 0 || !math.Signbit(f)):
		// A whole number under 1e6 is its integer digits in the shortest
		// 'g' form (from 1e6 on it takes an exponent); -0 keeps its sign
		// below.
		b = strconv.AppendInt(b, int64(f), 10)
		return append(b, ".0"...)
	default:
		b = strconv.AppendFloat(b, f, 'g', -1, bits)
	}
	// A point or an exponent is near the end ("…5.25", "…e+06"): look
	// there first.
	for i := len(b) - 1; i >= start; i-- {
		if c := b[i]; c == '.' || c == 'e' {
			return b
		}
	}
	return append(b, ".0"...)
}

// maxBroadcastCells bounds the cells a df's scalar columns are repeated
// into (rows times scalar columns): 1M cells, 16 MiB of values.
const maxBroadcastCells = 1 << 20

// pushRequest is the body of POST /push (Feast's PushFeaturesRequest;
// allow_registry_cache and transform_on_write are accepted and have
// nothing to change here).
type pushRequest struct {
	PushSourceName string         `json:"push_source_name"`
	DF             map[string]any `json:"df"`
	To             string         `json:"to"`
}

// columns turns a request's df into columns of equal length, as pandas'
// DataFrame(dict) does: a list is a column, a scalar (a JSON string,
// number, boolean or null) is repeated to the length of the list columns,
// and a df of scalars only is one row. An object is not a column value.
//
// The repeated cells are bounded (maxBroadcastCells): a list column costs
// its body bytes, but one short scalar would otherwise cost a value per
// row of the longest list.
func columns(df map[string]any) (map[string][]any, error) {
	out := make(map[string][]any, len(df))
	n := -1
	for _, name := range slices.Sorted(maps.Keys(df)) {
		switch c := df[name].(type) {
		case []any:
			out[name] = c
			if n < 0 {
				n = len(c)
			}
		case map[string]any:
			return nil, invalidf(serving.ReasonInvalidColumnValue, "df column '%s': want a list of values (or one value for every row), got an object", name)
		}
	}
	if n < 0 {
		n = 1
	}
	if scalars := len(df) - len(out); scalars > 0 && n > maxBroadcastCells/scalars {
		return nil, invalidf(serving.ReasonInvalidRequest, "df repeats %d single values over %d rows: more than %d cells; send those columns as lists", scalars, n, maxBroadcastCells)
	}
	for name, x := range df {
		if _, isList := x.([]any); isList {
			continue
		}
		col := make([]any, n)
		for i := range col {
			col[i] = x
		}
		out[name] = col
	}
	return out, nil
}

func (h *Handler) handlePush(w http.ResponseWriter, r *http.Request) {
	var req pushRequest
	if err := h.readJSON(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	if req.PushSourceName == "" {
		h.writeError(w, r, invalidf(serving.ReasonInvalidRequest, "push_source_name is required"))
		return
	}
	to, err := serving.ParsePushTo(req.To)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	df, err := columns(req.DF)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	rep, err := h.s.Push(r.Context(), req.PushSourceName, df, to)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.writeReport(w, r, rep)
}

// writeRequest is the body of POST /write-to-online-store (Feast's
// WriteToFeatureStoreRequest; allow_registry_cache and transform_on_write
// are accepted and have nothing to change here).
type writeRequest struct {
	FeatureViewName string         `json:"feature_view_name"`
	DF              map[string]any `json:"df"`
}

// handleWrite answers POST /write-to-online-store as Feast does: 200 with
// the JSON body null.
func (h *Handler) handleWrite(w http.ResponseWriter, r *http.Request) {
	var req writeRequest
	if err := h.readJSON(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	if req.FeatureViewName == "" {
		h.writeError(w, r, invalidf(serving.ReasonInvalidRequest, "feature_view_name is required"))
		return
	}
	df, err := columns(req.DF)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if _, err := h.s.WriteToOnlineStore(r.Context(), req.FeatureViewName, df); err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, []byte("null\n"))
}

// materializeRequest is the body of POST /materialize and
// /materialize-incremental (Feast's MaterializeRequest).
type materializeRequest struct {
	StartTS      *string  `json:"start_ts"`
	EndTS        *string  `json:"end_ts"`
	FeatureViews []string `json:"feature_views"`
}

func (h *Handler) handleMaterialize(w http.ResponseWriter, r *http.Request) {
	h.materialize(w, r, false)
}

func (h *Handler) handleMaterializeIncremental(w http.ResponseWriter, r *http.Request) {
	h.materialize(w, r, true)
}

func (h *Handler) materialize(w http.ResponseWriter, r *http.Request, incremental bool) {
	if h.opts.Materializer == nil {
		// An endpoint this server does not provide at all, not a problem
		// with the request: 501, written here rather than through a Kind.
		writeErrorBody(w, http.StatusNotImplemented, serving.ReasonMaterializeUnavailable, "this feature server does not run materializations")
		return
	}
	var req materializeRequest
	if err := h.readJSON(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	ts := func(name string, s *string) (time.Time, error) {
		if s == nil {
			return time.Time{}, invalidf(serving.ReasonInvalidRequest, "%s is required", name)
		}
		t, err := serving.ParseTime(*s)
		if err != nil {
			return time.Time{}, invalidf(serving.ReasonInvalidRequest, "%s: %v", name, err)
		}
		return t, nil
	}
	end, err := ts("end_ts", req.EndTS)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if repo := h.s.Repo(); repo != nil {
		for _, v := range req.FeatureViews {
			if _, ok := repo.Views[v]; !ok {
				h.writeError(w, r, invalidf(serving.ReasonUnknownView, "unknown feature view '%s'", v))
				return
			}
		}
	}
	var rep any
	if incremental {
		rep, err = h.opts.Materializer.MaterializeIncremental(r.Context(), end, req.FeatureViews)
	} else {
		var start time.Time
		if start, err = ts("start_ts", req.StartTS); err != nil {
			h.writeError(w, r, err)
			return
		}
		if start.After(end) {
			h.writeError(w, r, invalidf(serving.ReasonInvalidRequest, "start_ts %s is after end_ts %s", start.Format(time.RFC3339), end.Format(time.RFC3339)))
			return
		}
		rep, err = h.opts.Materializer.Materialize(r.Context(), start, end, req.FeatureViews)
	}
	h.s.ForgetStates(req.FeatureViews)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.writeReport(w, r, rep)
}

func (h *Handler) handleHealth(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	if err := h.s.Health(ctx); err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, []byte(`{"status":"ok"}`+"\n"))
}
