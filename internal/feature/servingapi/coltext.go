package servingapi

import (
	"slices"
	"time"

	"github.com/sluice-ml/sluice/internal/feature/serving"
)

// columnText remembers where the previous column's statuses and event
// timestamps were written in the answer. The columns of one feature view
// have the same statuses and timestamps row for row when every feature of
// the row is present (one read per entity row), so appendResponse copies
// the previous column's text for them instead of writing it again: at
// 100 rows × 50 features that is 49 of 50 columns.
type columnText struct {
	statuses []serving.Status // the previous column's statuses; nil before the first
	times    []time.Time      // the previous column's timestamps; nil before the first
	st, ts   [2]int           // their text: b[st[0]:st[1]], b[ts[0]:ts[1]]
}

// appendStatuses appends sts comma-separated, quoted.
func (p *columnText) appendStatuses(b []byte, sts []serving.Status) []byte {
	if p.statuses != nil && slices.Equal(sts, p.statuses) {
		return append(b, b[p.st[0]:p.st[1]]...)
	}
	start := len(b)
	for j, st := range sts {
		if j > 0 {
			b = append(b, ',')
		}
		b = append(b, quotedStatus(st)...)
	}
	p.statuses, p.st = sts, [2]int{start, len(b)}
	return b
}

// appendTimestamps appends tss comma-separated, quoted, through memo (one
// entry per row, as many as fit).
func (p *columnText) appendTimestamps(b []byte, tss []time.Time, memo []tsMemo) []byte {
	if p.times != nil && sameInstants(tss, p.times) {
		return append(b, b[p.ts[0]:p.ts[1]]...)
	}
	start := len(b)
	for j, ts := range tss {
		if j > 0 {
			b = append(b, ',')
		}
		if j < len(memo) {
			b = memo[j].append(b, ts)
			continue
		}
		b = append(b, '"')
		b = serving.AppendTimestamp(b, ts)
		b = append(b, '"')
	}
	p.times, p.ts = tss, [2]int{start, len(b)}
	return b
}

// sameInstants reports whether a and b hold the same instants, which
// serving.AppendTimestamp writes alike.
func sameInstants(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}
