package accuracy

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-ml/sluice/internal/release/record/natstest"
)

// TestKVFleetJoin runs two joiners (two gateway replicas) on one NATS
// JetStream bucket: predictions logged by A join outcomes posted to B,
// outcomes held by B join predictions logged by A, and a duplicate posted
// to A after B joined is refused.
func TestKVFleetJoin(t *testing.T) {
	srv := natstest.Start(t)
	c := &clock{t: time.Now().UTC().Truncate(time.Second)}
	open := func() (*Joiner, func()) {
		kv, err := OpenKV(t.Context(), KVOptions{URL: srv.URL(), Bucket: "acc_fleet", TTL: time.Hour, MaxEntries: 1000}, nil)
		if err != nil {
			t.Fatal(err)
		}
		j := New(kv, Options{Lookback: time.Hour, Now: c.now}, nil, nil)
		j.SetServices([]Service{{Name: "eta", Spec: etaSpec()}})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = j.Run(ctx); close(done) }()
		return j, func() {
			cancel()
			if err := j.Close(context.Background()); err != nil {
				t.Errorf("Close: %v", err)
			}
			<-done
		}
	}
	a, stopA := open()
	defer stopA()
	b, stopB := open()
	defer stopB()
	ctx := context.Background()

	// Outcomes for k5..k9 reach B before any prediction.
	var early []Outcome
	for i := 5; i < 10; i++ {
		early = append(early, outcome(fmt.Sprintf("k%d", i), 33, c.t))
	}
	res, err := b.Ingest(ctx, early)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r != ResultHeld {
			t.Fatalf("early outcome %d at B: %s, want held", i, r)
		}
	}
	for i := range 10 {
		a.Offer(pred(fmt.Sprintf("k%d", i), "1", "eu", 30, c.t), nil)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var late []Outcome
	for i := range 5 {
		late = append(late, outcome(fmt.Sprintf("k%d", i), 31, c.t))
	}
	res, err = b.Ingest(ctx, late)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r != ResultJoined {
			t.Fatalf("outcome %d at B for a prediction served by A: %s, want joined", i, r)
		}
	}
	// The same outcome again, now at A: counted once.
	res, err = a.Ingest(ctx, late[:1])
	if err != nil || res[0] != ResultDuplicate {
		t.Fatalf("duplicate at A: %v %v, want duplicate", res, err)
	}
	// B joined k0..k4 (MAE 1); A joined k5..k9 when its predictions met
	// the outcomes B held (MAE 3).
	if got := testutil.ToFloat64(b.m.online.WithLabelValues("eta", "1", "eta_minutes", "all", "mae")); got != 1 {
		t.Errorf("B's mae %v, want 1", got)
	}
	if got := testutil.ToFloat64(a.m.online.WithLabelValues("eta", "1", "eta_minutes", "all", "mae")); got != 3 {
		t.Errorf("A's mae %v, want 3", got)
	}
}
