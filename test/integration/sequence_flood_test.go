package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/testutil/harness"
	"github.com/sluice-ml/sluice/internal/testutil/onnxgen"
)

// Issue 22 item 9: one client flooding sequence STARTs without END locked
// a 4-slot sequence model for every other client during the flood and for
// the 60 s idle timeout after. Now the flooding client holds at most
// sluice.max_sequences_per_client sequences (16 here by default; more
// STARTs get 429 sequence_client_limit), and while another client waits,
// its idle sequences above its fair share of the slots are released after
// the contended idle timeout (1 s): the other client's whole sequence
// completes while the flood goes on.
//
// The flood comes from 127.0.0.1, the other client from 127.0.0.2: both
// anonymous, so each is counted by its address.
func TestSequenceFloodDoesNotLockOthers(t *testing.T) {
	// Not parallel: the contended idle timeout it relies on is 1 s.
	repo := t.TempDir()
	dir := filepath.Join(repo, "acc_flood", "1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.onnx"), onnxgen.Accumulator(onnxgen.Uint64).Marshal(), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := sequenceConfig("acc_flood", "direct { }", "TYPE_UINT64", 60_000_000) + "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
	if err := os.WriteFile(filepath.Join(repo, "acc_flood", "config.pbtxt"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--model-repository", repo)
	url := "http://" + s.http + "/v2/models/acc_flood/infer"

	body := func(id uint64, v int32, start, end bool) []byte {
		b, _ := json.Marshal(map[string]any{
			"inputs":     []any{map[string]any{"name": "INPUT", "datatype": "INT32", "shape": []int{1, 1}, "data": []int32{v}}},
			"outputs":    []any{map[string]any{"name": "OUTPUT"}},
			"parameters": map[string]any{"sequence_id": id, "sequence_start": start, "sequence_end": end},
		})
		return b
	}
	post := func(ctx context.Context, c *http.Client, b []byte) (int, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
		if err != nil {
			return 0, nil, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		rb, err := io.ReadAll(resp.Body)
		return resp.StatusCode, rb, err
	}

	// Client A floods STARTs, each on a new id, never an END.
	var held, refused atomic.Int64
	var other atomic.Value
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var next atomic.Uint64
	flood := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	for range 24 {
		wg.Go(func() {
			for ctx.Err() == nil {
				code, b, err := post(ctx, flood, body(100000+next.Add(1), 1, true, false))
				switch {
				case ctx.Err() != nil:
					return
				case err != nil:
					other.CompareAndSwap(nil, err.Error())
				case code == http.StatusOK:
					held.Add(1)
				case code == http.StatusTooManyRequests && bytes.Contains(b, []byte(`"reason":"sequence_client_limit"`)):
					refused.Add(1)
				default:
					other.CompareAndSwap(nil, fmt.Sprintf("%d %s", code, b))
				}
			}
		})
	}
	stopFlood := func() { cancel(); wg.Wait() }
	defer stopFlood()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		harness.WaitFor(t, 60*time.Second, 10*time.Millisecond, what, func() (bool, string) {
			return cond(), fmt.Sprintf("held %d, refused %d, other %v; logs:\n%s", held.Load(), refused.Load(), other.Load(), s.logs)
		})
	}
	waitFor("the flood to fill the slots and reach its cap", func() bool { return held.Load() >= 4 && refused.Load() >= 10 })

	// Client B, from another address, runs a whole sequence meanwhile.
	// Without the bounds its START waited behind the flood's backlog for
	// the 60 s idle timeout; 30 s is far more than the 1 s it needs.
	b := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext,
	}}
	for i, st := range []struct {
		v          int32
		start, end bool
		want       int32
	}{{3, true, false, 3}, {4, false, false, 7}, {5, false, true, 12}} {
		code, rb, err := post(t.Context(), b, body(7, st.v, st.start, st.end))
		if err != nil || code != http.StatusOK {
			t.Fatalf("client B step %d: %d %s %v (held %d, refused %d)", i, code, rb, err, held.Load(), refused.Load())
		}
		var r struct {
			Outputs []struct{ Data []int32 } `json:"outputs"`
		}
		if err := json.Unmarshal(rb, &r); err != nil || len(r.Outputs) != 1 || len(r.Outputs[0].Data) != 1 || r.Outputs[0].Data[0] != st.want {
			t.Fatalf("client B step %d: %s, want sum %d", i, rb, st.want)
		}
	}
	atB := refused.Load()
	waitFor("the flood to go on after B's sequence", func() bool { return refused.Load() > atB })
	stopFlood()
	if o := other.Load(); o != nil {
		t.Fatalf("the flood got an unexpected answer: %v", o)
	}
	code, _, m := do(t, http.MethodGet, "http://"+s.metrics+"/metrics", nil, nil)
	if code != http.StatusOK || !bytes.Contains(m, []byte(`sluice_model_sequences_contended_released_total{model="acc_flood",version="1"}`)) {
		t.Fatalf("metrics = %d, want sluice_model_sequences_contended_released_total for acc_flood", code)
	}
}
