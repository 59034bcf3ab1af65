package authz

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// lines parses every audit line in b.
func lines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "line %q", sc.Text())
		out = append(out, m)
	}
	require.NoError(t, sc.Err())
	return out
}

func TestAuditorLine(t *testing.T) {
	var buf bytes.Buffer
	reg := prometheus.NewRegistry()
	a := NewAuditor(&buf, reg)
	at := time.Date(2026, 1, 2, 15, 4, 5, 123000000, time.FixedZone("x", 3600))
	a.Record(Event{
		Time: at, Component: ComponentAdmin, Action: "rollout.promote", Target: "fraud\n\"x\"",
		Who: "ci", Via: ViaToken, Addr: "10.0.0.7:51234", Status: 200, Result: ResultOK, RequestID: "r-1",
	})
	a.Record(Event{
		Component: ComponentModelsGRPC, Action: "repository.load", Result: ResultDenied, Status: 401,
		Reason: ReasonMissingCredential, GRPCCode: "Unauthenticated",
	})

	raw := buf.String()
	require.Equal(t, 2, strings.Count(raw, "\n"), "one line per event; a newline in a field must be escaped")
	first, _, _ := strings.Cut(raw, "\n")
	require.Equal(t, `{"time":"2026-01-02T14:04:05.123Z","audit":true,"component":"admin","action":"rollout.promote",`+
		`"target":"fraud\n\"x\"","who":"ci","via":"token","source_addr":"10.0.0.7:51234","status":200,"result":"ok",`+
		`"reason":"","request_id":"r-1"}`, first)
	got := lines(t, buf.Bytes())
	require.Len(t, got, 2)
	require.Equal(t, "Unauthenticated", got[1]["grpc_code"])
	require.Equal(t, true, got[1]["audit"])
	ts, err := time.Parse(time.RFC3339Nano, got[1]["time"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), ts, time.Minute, "a zero Time means now")

	require.InDelta(t, 1, testutil.ToFloat64(a.events.WithLabelValues(ComponentAdmin, "rollout.promote", ResultOK)), 0)
	require.InDelta(t, 1, testutil.ToFloat64(a.events.WithLabelValues(ComponentModelsGRPC, "repository.load", ResultDenied)), 0)
	n, err := testutil.GatherAndCount(reg, "sluice_audit_events_total")
	require.NoError(t, err)
	require.Equal(t, 2, n)
}

func TestAuditorClipsLongFields(t *testing.T) {
	var buf bytes.Buffer
	a := NewAuditor(&buf, nil)
	a.Record(Event{Component: ComponentFeatures, Action: "push", Target: strings.Repeat("é", 1000), RequestID: strings.Repeat("r", 5000)})
	got := lines(t, buf.Bytes())
	require.Len(t, got, 1)
	target := got[0]["target"].(string)
	require.LessOrEqual(t, len(target), maxFieldBytes+len("…"))
	require.True(t, strings.HasSuffix(target, "…"))
	require.NotContains(t, target, "\uFFFD", "cut on a rune boundary")
	require.LessOrEqual(t, len(got[0]["request_id"].(string)), maxFieldBytes+len("…"))
}

func TestAuditorNilWriterStillCounts(t *testing.T) {
	a := NewAuditor(nil, prometheus.NewRegistry())
	a.Record(Event{Component: ComponentAdmin, Action: "reload", Result: ResultOK})
	require.InDelta(t, 1, testutil.ToFloat64(a.events.WithLabelValues(ComponentAdmin, "reload", ResultOK)), 0)

	var nilAuditor *Auditor
	nilAuditor.Record(Event{Action: "reload"}) // records nothing, does not panic
}

func TestAuditorsShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := NewAuditor(nil, reg), NewAuditor(nil, reg)
	a.Record(Event{Component: ComponentAdmin, Action: "reload", Result: ResultOK})
	b.Record(Event{Component: ComponentAdmin, Action: "reload", Result: ResultOK})
	require.InDelta(t, 2, testutil.ToFloat64(a.events.WithLabelValues(ComponentAdmin, "reload", ResultOK)), 0)
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestAuditorCountsWriteErrors(t *testing.T) {
	a := NewAuditor(failingWriter{}, prometheus.NewRegistry())
	a.Record(Event{Component: ComponentAdmin, Action: "reload", Result: ResultOK})
	require.InDelta(t, 1, testutil.ToFloat64(a.writeErrors), 0)
	require.InDelta(t, 1, testutil.ToFloat64(a.events.WithLabelValues(ComponentAdmin, "reload", ResultOK)), 0)
}

// writeLog is a writer that is not safe for concurrent use on its own
// (the race detector notices if the Auditor lets writes overlap) and
// remembers each Write call.
type writeLog struct {
	calls [][]byte
}

func (w *writeLog) Write(b []byte) (int, error) {
	w.calls = append(w.calls, append([]byte(nil), b...))
	return len(b), nil
}

func TestAuditorConcurrentWritersDoNotInterleave(t *testing.T) {
	const writers, perWriter = 8, 200
	w := &writeLog{}
	a := NewAuditor(w, prometheus.NewRegistry())
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			for j := range perWriter {
				a.Record(Event{Component: ComponentAdmin, Action: "reload", Target: strings.Repeat("t", i*30+j%7), Result: ResultOK, Who: "w"})
			}
		})
	}
	wg.Wait()
	require.Len(t, w.calls, writers*perWriter)
	var all []byte
	for _, c := range w.calls {
		require.Equal(t, 1, bytes.Count(c, []byte("\n")), "each Write is exactly one line")
		require.True(t, bytes.HasSuffix(c, []byte("\n")))
		all = append(all, c...)
	}
	require.Len(t, lines(t, all), writers*perWriter)
	require.InDelta(t, writers*perWriter, testutil.ToFloat64(a.events.WithLabelValues(ComponentAdmin, "reload", ResultOK)), 0)
}
