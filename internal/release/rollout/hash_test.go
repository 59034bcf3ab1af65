package rollout_test

import (
	"strconv"
	"testing"

	"github.com/sluice-ml/sluice/internal/gateway/route"
	"github.com/sluice-ml/sluice/internal/release/rollout"
)

// TestHashIsTheRoutingHash checks that the copied hash stays the gateway's,
// so a rollout's shares agree with the routes' sticky splits on every replica.
func TestHashIsTheRoutingHash(t *testing.T) {
	for i := range 1000 {
		for _, s := range []string{strconv.Itoa(i), "order-" + strconv.Itoa(i), "user-é-" + strconv.Itoa(i)} {
			if got, want := rollout.Hash(s), route.Hash(s); got != want {
				t.Fatalf("Hash(%q) = %x, route.Hash = %x", s, got, want)
			}
		}
	}
	if got, want := rollout.Hash(""), route.Hash(""); got != want {
		t.Fatalf("Hash(\"\") = %x, route.Hash = %x", got, want)
	}
}
