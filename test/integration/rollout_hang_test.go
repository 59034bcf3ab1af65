package integration_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/release/rollout"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// TestRolloutNATSHung: two `sluice serve -c` replicas share the rollouts
// of two services through a private nats-server, which the test hangs
// with SIGSTOP (its connections stay open and nothing answers). An
// operator rolls back service A on replica 0 while it hangs: the write
// to the fleet waits on NATS, but nothing else waits on that write:
//
//   - every GET /rollout (every service's status) on replica 0 answers
//     within a second, while a write to the fleet can take two;
//   - service B's requests are answered 200 within a second;
//   - the rollback is made on replica 0 (it is always safe) and marked
//     pending; after SIGCONT it is stored in the fleet and replica 1
//     follows: both replicas agree on the state and its revision, with
//     one rollback in their history.
func TestRolloutNATSHung(t *testing.T) {
	// Not parallel: it bounds request and status latency while NATS hangs.
	nats, repo := flSharedState(t, "hangit")
	const svcA, svcB = "hang-a", "hang-b"
	base := gwExample(t)
	var services []any
	for _, name := range []string{svcA, svcB} {
		s := gwService(base, name, nil, gwRoute("default", nil, "", 100, 0))
		s["rollout"] = map[string]any{
			"stable":       map[string]any{"version": "1"},
			"candidate":    map[string]any{"version": "2"},
			"stages":       []any{map[string]any{"name": "all", "traffic_percent": 50, "min_duration": "1h"}},
			"min_requests": 1000000, // the gates never judge: only the operator moves the rollouts
		}
		services = append(services, s)
	}
	gateway := map[string]any{
		"drain_period": "200ms",
		"access_log":   "off",
		"clients":      []any{map[string]any{"id": "it-main", "api_key": "${" + gwMainKeyEnv + "}"}},
		"anonymous":    map[string]any{"allowed": false},
		"services":     services,
	}
	chains := flReplicas(t, 2, "hang", nats, repo, gateway)
	ids := chains[0].presentIDs(t)
	body := gwBody(ids.users[0], ids.packages[0], ids.routes[0], 30, 0.5)
	if res := chains[0].mustPredict(t, svcB, body, gwAuth); res.code != http.StatusOK {
		t.Fatalf("POST %s before the hang: %d %s", svcB, res.code, res.body)
	}

	nats.Pause()
	paused := true
	defer func() {
		if paused {
			nats.Resume()
		}
	}()
	type answer struct {
		code int
		body []byte
		err  error
		took time.Duration
	}
	rolledBack := make(chan answer, 1)
	go func() {
		begin := time.Now()
		res, err := chains[0].send(t.Context(), http.MethodPost, chains[0].url(chains[0].admin, "/rollout/"+svcA+"/rollback?reason=hung"), nil, nil)
		rolledBack <- answer{res.code, res.body, err, time.Since(begin)}
	}()
	// While the rollback's write waits on NATS: admin reads and the other
	// service's requests, for three seconds (a write gives up after two).
	var reads, predicts []time.Duration
	var mu sync.Mutex
	var wg sync.WaitGroup
	until := time.Now().Add(3 * time.Second)
	wg.Go(func() {
		for time.Now().Before(until) {
			begin := time.Now()
			res, err := chains[0].get(t.Context(), chains[0].url(chains[0].admin, "/rollout"))
			if err != nil || res.code != http.StatusOK {
				t.Errorf("GET /rollout while NATS hung: %v %d %s", err, res.code, res.body)
				return
			}
			mu.Lock()
			reads = append(reads, time.Since(begin))
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	})
	wg.Go(func() {
		for time.Now().Before(until) {
			begin := time.Now()
			res, err := chains[0].predict(t.Context(), svcB, body, gwAuth)
			if err != nil || res.code != http.StatusOK {
				t.Errorf("POST %s while NATS hung: %v %d %s", svcB, err, res.code, res.body)
				return
			}
			mu.Lock()
			predicts = append(predicts, time.Since(begin))
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	})
	wg.Wait()
	a := <-rolledBack
	if a.err != nil || a.code != http.StatusOK {
		t.Fatalf("POST rollback while NATS hung: %v %d %s", a.err, a.code, a.body)
	}
	t.Logf("while NATS hung: the rollback answered in %v; GET /rollout took %v; %s took %v",
		a.took.Round(time.Millisecond), rounded(reads), svcB, rounded(predicts))
	for _, d := range reads {
		if d > time.Second {
			t.Errorf("a GET /rollout took %v while NATS hung: the status waits on the fleet's write", d)
		}
	}
	for _, d := range predicts {
		if d > time.Second {
			t.Errorf("a request of %s took %v while NATS hung", svcB, d)
		}
	}
	st := hangStatus(t, chains[0], svcA)
	if st.State != rollout.StateRolledBack || st.Fleet == nil || !st.Fleet.Pending {
		t.Fatalf("replica 0 while NATS hangs: %s, fleet %+v; want rolled back here, pending", st.State, st.Fleet)
	}

	nats.Resume()
	paused = false
	var s0, s1 flRolloutStatus
	took := harness.WaitFor(t, 20*time.Second, 100*time.Millisecond, "convergence after NATS ran again", func() (bool, string) {
		s0, s1 = hangStatus(t, chains[0], svcA), hangStatus(t, chains[1], svcA)
		return s0.State == rollout.StateRolledBack && s1.State == rollout.StateRolledBack &&
				!s0.Fleet.Pending && s0.Fleet.Revision == s1.Fleet.Revision,
			fmt.Sprintf("replica 0 %s %+v, replica 1 %s %+v", s0.State, s0.Fleet, s1.State, s1.Fleet)
	})
	for i, s := range []flRolloutStatus{s0, s1} {
		n := 0
		for _, h := range s.History {
			if h.Kind == rollout.KindRollback {
				n++
			}
		}
		if n != 1 || s.Reason == nil || s.Reason.Message != "manual rollback: hung" {
			t.Errorf("replica %d: %d rollbacks in its history, reason %+v; want the one made while NATS hung", i, n, s.Reason)
		}
	}
	t.Logf("converged at revision %d, %v after SIGCONT", s0.Fleet.Revision, took.Round(time.Millisecond))
	if st := hangStatus(t, chains[1], svcB); st.State != rollout.StateProgressing {
		t.Errorf("%s on replica 1: %s, want progressing (nothing touched it)", svcB, st.State)
	}
}

func hangStatus(t *testing.T, c *gwChain, service string) flRolloutStatus {
	t.Helper()
	var all []flRolloutStatus
	c.adminJSON(t, "/rollout", &all)
	for _, s := range all {
		if s.Service == service {
			if s.Fleet == nil {
				t.Fatalf("GET /rollout: %s has no fleet status", service)
			}
			return s
		}
	}
	t.Fatalf("GET /rollout: no rollout of %s in %+v", service, all)
	return flRolloutStatus{}
}

func rounded(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
