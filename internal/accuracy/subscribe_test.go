package accuracy

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-ml/sluice/internal/release/record/natstest"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

func TestSubscriberJoinsOutcomes(t *testing.T) {
	srv := natstest.Start(t)
	c := &clock{t: time.Now().UTC().Truncate(time.Second)}
	j, stop := newTestJoiner(t, filepath.Join(t.TempDir(), "p.db"), c, nil)
	defer stop()
	j.Offer(pred("o-1", "1", "eu", 30, c.t), nil)
	if err := j.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub := NewSubscriber(nc, "sluice.outcomes", j, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	ask := func(body string) map[string]any {
		t.Helper()
		var m *nats.Msg
		// The subscription may not be in place yet.
		harness.WaitFor(t, 50*time.Second, 20*time.Millisecond, "an answer on sluice.outcomes.eta", func() (bool, string) {
			var err error
			m, err = nc.Request("sluice.outcomes.eta", []byte(body), time.Second)
			return err == nil, fmt.Sprint(err)
		})
		var out map[string]any
		if err := json.Unmarshal(m.Data, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	got := ask(`[{"key":"o-1","values":{"actual_minutes":31}},{"key":"o-1","values":{"actual_minutes":40}},{"key":"o-2","values":{"actual_minutes":5}}]`)
	res, _ := got["results"].([]any)
	if len(res) != 3 || res[0] != "joined" || res[1] != "duplicate" || res[2] != "held" {
		t.Fatalf("answer %v, want joined, duplicate, held", got)
	}
	if got := ask(`{"key":"o-3"}`); got["reason"] != "invalid_outcome" {
		t.Fatalf("answer %v, want invalid_outcome", got)
	}
}
