package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
)

// streamInfo is what list and describe show of a stream feature view.
type streamInfo struct {
	Tile            string   `json:"tile"`
	AllowedLateness string   `json:"allowed_lateness"`
	LatePolicy      string   `json:"late_policy"`
	Aggregations    []string `json:"aggregations"` // "name = function(column) over window"
	// LagSeconds is the stream's lag: now minus the newest event time the
	// aggregators applied (absent when unknown or nothing was applied).
	LagSeconds *float64 `json:"lag_seconds,omitempty"`
}

func describeStream(v *feature.View, fs *viewFreshness, now time.Time) *streamInfo {
	sv := v.Stream
	if sv == nil {
		return nil
	}
	si := &streamInfo{Tile: sv.Tile.String(), AllowedLateness: sv.AllowedLateness.String(), LatePolicy: sv.LatePolicy}
	for _, a := range sv.Aggregations {
		si.Aggregations = append(si.Aggregations, fmt.Sprintf("%s = %s(%s) over %s", a.Name, a.Function, a.Column, a.Window))
	}
	if fs != nil && fs.Known && !fs.NewestEvent.IsZero() {
		lag := now.Sub(fs.NewestEvent).Seconds()
		si.LagSeconds = &lag
	}
	return si
}

// writeStreamDescription prints a stream view's part of describe.
func writeStreamDescription(w io.Writer, si *streamInfo) {
	if si == nil {
		return
	}
	fmt.Fprintf(w, "stream: tile %s, allowed lateness %s, late events: %s (counted)\naggregations:\n", si.Tile, si.AllowedLateness, si.LatePolicy)
	for _, a := range si.Aggregations {
		fmt.Fprintf(w, "  %s\n", a)
	}
	if si.LagSeconds != nil {
		fmt.Fprintf(w, "stream lag: %s (now − newest applied event time)\n", time.Duration(*si.LagSeconds*float64(time.Second)).Round(time.Millisecond))
	} else {
		fmt.Fprintln(w, "stream lag: unknown (no event applied yet, or the online store was not read)")
	}
}
