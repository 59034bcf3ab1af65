package perf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"sync/atomic"
)

// A gateway service (Options.Service) is measured with a JSON body made
// from a template: each {{rand LO HI}} in it is a random integer in
// [LO, HI], drawn per request, so a run can spread over entity ids the
// way real traffic does.

// bodyTemplate is a parsed body template: literal parts between random
// integer slots.
type bodyTemplate struct {
	parts [][]byte   // len(slots)+1 literal pieces
	slots [][2]int64 // [lo, hi] of each slot
}

var randSlot = regexp.MustCompile(`\{\{\s*rand\s+(-?\d+)\s+(-?\d+)\s*\}\}`)

// maxTemplateBytes bounds a body template.
const maxTemplateBytes = 1 << 20

// parseBodyTemplate reads a template. It fails on a slot whose bounds are
// reversed or do not fit an int64, and on a body that is not JSON once
// its slots are filled.
func parseBodyTemplate(text []byte) (*bodyTemplate, error) {
	if len(text) > maxTemplateBytes {
		return nil, fmt.Errorf("%w: the body template is larger than %d bytes", ErrInput, maxTemplateBytes)
	}
	t := &bodyTemplate{}
	last := 0
	for _, m := range randSlot.FindAllSubmatchIndex(text, -1) {
		lo, err1 := strconv.ParseInt(string(text[m[2]:m[3]]), 10, 64)
		hi, err2 := strconv.ParseInt(string(text[m[4]:m[5]]), 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%w: body template %s: %w", ErrInput, text[m[0]:m[1]], err)
		}
		if hi < lo || hi-lo < 0 { // hi-lo < 0: the range overflows
			return nil, fmt.Errorf("%w: body template %s: the range is empty or too large", ErrInput, text[m[0]:m[1]])
		}
		t.parts = append(t.parts, text[last:m[0]])
		t.slots = append(t.slots, [2]int64{lo, hi})
		last = m[1]
	}
	t.parts = append(t.parts, text[last:])
	// A slot's value must be JSON whatever it is: try each slot at its
	// bounds and at 0 (a digit after a slot makes 0 a leading zero).
	for _, pick := range []func(lo, hi int64) int64{
		func(lo, _ int64) int64 { return lo },
		func(_, hi int64) int64 { return hi },
		func(lo, hi int64) int64 { return min(max(0, lo), hi) },
		func(lo, hi int64) int64 { return min(max(-1, lo), hi) },
	} {
		if b := t.fillWith(nil, pick); !json.Valid(b) {
			return nil, fmt.Errorf("%w: the body template is not JSON once its {{rand LO HI}} slots are filled: %.200s", ErrInput, b)
		}
	}
	return t, nil
}

// fillWith appends a body with each slot's value chosen by pick.
func (t *bodyTemplate) fillWith(dst []byte, pick func(lo, hi int64) int64) []byte {
	for i, s := range t.slots {
		dst = append(dst, t.parts[i]...)
		dst = strconv.AppendInt(dst, pick(s[0], s[1]), 10)
	}
	return append(dst, t.parts[len(t.parts)-1]...)
}

// fill appends a body with fresh random values to dst.
func (t *bodyTemplate) fill(dst []byte, rng *rand.Rand) []byte {
	return t.fillWith(dst, func(lo, hi int64) int64 { return lo + rng.Int64N(hi-lo+1) })
}

// serviceSender posts filled templates to the gateway's service path.
func (c *httpClient) serviceSender(service string, t *bodyTemplate, hdr http.Header, seed uint64) sender {
	u := c.base + "/v1/services/" + url.PathEscape(service) + ":predict"
	h := hdr.Clone()
	if h == nil {
		h = http.Header{}
	}
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
	var seq atomic.Uint64
	return func(ctx context.Context) error {
		rng := rand.New(rand.NewPCG(seed, seq.Add(1))) //nolint:gosec // load-test ids, repeatable by seed
		body := t.fill(make([]byte, 0, 256), rng)
		return c.post(ctx, u, h, body)
	}
}
