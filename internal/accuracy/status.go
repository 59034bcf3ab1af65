package accuracy

import (
	"maps"
	"slices"
	"strings"
)

// SliceComparison is one slice of a rollout group: the candidate's joined
// pairs, the other versions' in the group, and the other versions' across
// every group (the fallback baseline when a stage sends the whole group
// to the candidate).
type SliceComparison struct {
	Slice     string
	Candidate Stats
	Stable    Stats
	StableAll Stats
}

// Compare sums up the pairs joined for predictions of output in rollout
// group, per slice: version candidate against every other version. Slices
// are in order, "all" first.
func (j *Joiner) Compare(service, group, output, candidate string) []SliceComparison {
	j.mu.Lock()
	defer j.mu.Unlock()
	s, ok := j.service(service)
	if !ok {
		return nil
	}
	bySlice := map[string]*SliceComparison{}
	for k, st := range s.gate {
		parts := strings.Split(k, "\x00")
		if len(parts) != 4 || parts[3] != output {
			continue
		}
		g, sl, v := parts[0], parts[1], parts[2]
		if g != group && g != "*" {
			continue
		}
		c := bySlice[sl]
		if c == nil {
			c = &SliceComparison{Slice: sl}
			bySlice[sl] = c
		}
		switch {
		case g == "*" && v != candidate:
			c.StableAll.merge(st)
		case g == "*":
		case v == candidate:
			c.Candidate.merge(st)
		default:
			c.Stable.merge(st)
		}
	}
	out := make([]SliceComparison, 0, len(bySlice))
	for _, k := range sortedKeys(bySlice) {
		out = append(out, *bySlice[k])
	}
	slices.SortStableFunc(out, func(a, b SliceComparison) int {
		switch {
		case a.Slice == "all" && b.Slice != "all":
			return -1
		case b.Slice == "all" && a.Slice != "all":
			return 1
		}
		return 0
	})
	return out
}

// ServiceStatus is a service's online accuracy for the admin API and the
// console.
type ServiceStatus struct {
	Service string         `json:"service"`
	Window  string         `json:"window"`
	Series  []SeriesStatus `json:"series"`
	// Logged and Joined count predictions per version since start.
	Logged map[string]float64 `json:"logged"`
	Joined map[string]float64 `json:"joined"`
}

// SeriesStatus is one version, output and slice over the rolling window.
type SeriesStatus struct {
	Version string             `json:"version"`
	Output  string             `json:"output"`
	Slice   string             `json:"slice"`
	Pairs   uint64             `json:"pairs"`
	Metrics map[string]float64 `json:"metrics"`
	Offline map[string]float64 `json:"offline,omitempty"`
}

// Status returns every service's series at now.
func (j *Joiner) Status() []ServiceStatus {
	t := j.opts.Now().UnixNano()
	j.mu.Lock()
	defer j.mu.Unlock()
	svcs := *j.services.Load()
	out := make([]ServiceStatus, 0, len(svcs))
	for _, name := range sortedKeys(svcs) {
		s := svcs[name]
		ss := ServiceStatus{Service: name, Window: s.window.String(), Logged: copyMap(s.logged), Joined: copyMap(s.joined)}
		for _, k := range sortedKeys(s.series) {
			se := s.series[k]
			sum := se.w.sum(t)
			st := SeriesStatus{Version: se.version, Output: se.output, Slice: se.slice, Pairs: sum.N, Metrics: map[string]float64{}}
			for _, m := range append(slices.Clone(regressionOrBinary(sum.binary)), "coverage") {
				if v, ok := sum.Metric(m); ok {
					st.Metrics[m] = v
				}
			}
			for _, off := range s.spec.Offline {
				if off.Version == se.version && off.Output == se.output {
					st.Offline = off.Metrics
				}
			}
			ss.Series = append(ss.Series, st)
		}
		out = append(out, ss)
	}
	return out
}

func regressionOrBinary(binary bool) []string {
	if binary {
		return []string{"accuracy", "log_loss", "brier", "auc"}
	}
	return []string{"mae", "rmse", "bias", "mape"}
}

func copyMap(m map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(m))
	maps.Copy(out, m)
	return out
}
