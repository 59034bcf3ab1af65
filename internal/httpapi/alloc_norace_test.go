//go:build !race

// The race detector allocates on its own, so allocation counts mean
// nothing under it: this file builds only without -race, and make test
// runs it in a separate pass without the race detector.

package httpapi

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecodeInferJSONAllocations(t *testing.T) {
	body := parcelETARequest()
	allocs := testing.AllocsPerRun(50, func() {
		if _, err := decodeInferJSON(body); err != nil {
			t.Fatal(err)
		}
	})
	// The decoder, the inputs and their binary sizes, the id and three
	// names, and three data buffers.
	require.LessOrEqual(t, allocs, 10.0)
}
