package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/release/rollout"
)

// fakeAdmin answers the gateway admin API's rollout endpoints.
func fakeAdmin(t *testing.T, got *[]string) *httptest.Server {
	t.Helper()
	st := rollout.Status{
		Service: "parcel-eta", State: rollout.StateRolledBack, Stage: 1, StageName: "long-tail",
		StageSince: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC),
		Stable:     rollout.Target{Version: "1"}, Candidate: rollout.Target{Version: "2"},
		Reason: &rollout.Reason{Gate: rollout.GateLowConfidenceShare, Message: `gate low_confidence_share failed in stage "long-tail"`},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /rollout", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode([]rollout.Status{st})
	})
	mux.HandleFunc("POST /rollout/{service}/{action}", func(w http.ResponseWriter, r *http.Request) {
		*got = append(*got, r.PathValue("service")+" "+r.PathValue("action")+" "+r.URL.Query().Get("reason"))
		if r.PathValue("service") != "parcel-eta" {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"service nope has no rollout","reason":"not_found"}`))
			return
		}
		_ = json.NewEncoder(w).Encode(st)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestRolloutCommands(t *testing.T) {
	var got []string
	srv := fakeAdmin(t, &got)
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Run(t.Context(), append([]string{"rollout", "--admin", srv.URL}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, out, _ := run("status")
	if code != 0 || !strings.Contains(out, `parcel-eta: rolled_back, stage 2 "long-tail"`) || !strings.Contains(out, "rolled back: gate low_confidence_share failed") {
		t.Fatalf("status = %d %q", code, out)
	}
	if code, _, errOut := run("status", "other"); code != 1 || !strings.Contains(errOut, "no rollout for service other") {
		t.Errorf("status other = %d %q", code, errOut)
	}

	// A gateway without any rollout: an answer (exit 0), not an error.
	empty := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("[]")) }))
	t.Cleanup(empty.Close)
	var eout, eerr bytes.Buffer
	if code := Run(t.Context(), []string{"rollout", "--admin", empty.URL, "status"}, &eout, &eerr); code != 0 || !strings.Contains(eout.String(), "No rollouts") {
		t.Errorf("status without rollouts = %d %q %q", code, eout.String(), eerr.String())
	}
	if code, _, _ := run("rollback", "parcel-eta", "--reason", "bad eu numbers"); code != 0 {
		t.Errorf("rollback exit %d", code)
	}
	if len(got) != 1 || got[0] != "parcel-eta rollback bad eu numbers" {
		t.Errorf("admin saw %q", got)
	}
	if code, _, errOut := run("promote", "nope"); code != 1 || !strings.Contains(errOut, "service nope has no rollout (not_found)") {
		t.Errorf("promote nope = %d %q", code, errOut)
	}
}
