package modelrepo

import (
	"testing"
)

// BenchmarkEnsembleChain is one request through the two-step "chain"
// ensemble over the fake backend: the ensemble runner's own cost on top
// of two step requests.
func BenchmarkEnsembleChain(b *testing.B) {
	h := newHarness(b, Options{Repositories: []string{ensembleRepo(b)}, StrictReadiness: true})
	h.start(b)
	req := ensembleRequest("chain")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.m.Infer(b.Context(), req); err != nil {
			b.Fatal(err)
		}
	}
}
