package console

import (
	"context"
	"time"

	"github.com/sluice-ml/sluice/internal/modelrepo"
)

// ModelRepository is what ModelsFromManager reads; *modelrepo.Manager
// satisfies it.
type ModelRepository interface {
	Index(ctx context.Context, readyOnly bool) []modelrepo.IndexEntry
	Statistics(ctx context.Context, name, version string) ([]modelrepo.ModelStats, error)
	Metadata(ctx context.Context, name, version string) (*modelrepo.Metadata, error)
}

// ModelsFromManager adapts the model server's repository manager.
func ModelsFromManager(m ModelRepository) ModelsSource { return managerModels{m} }

type managerModels struct{ m ModelRepository }

func (a managerModels) Models(ctx context.Context) ([]Model, error) {
	stats, err := a.m.Statistics(ctx, "", "")
	if err != nil {
		return nil, err
	}
	type key struct{ name, version string }
	byVersion := make(map[key]modelrepo.ModelStats, len(stats))
	for _, s := range stats {
		byVersion[key{s.Name, s.Version}] = s
	}
	var out []Model
	for _, e := range a.m.Index(ctx, false) {
		if len(out) == 0 || out[len(out)-1].Name != e.Name {
			out = append(out, Model{Name: e.Name, Versions: []ModelVersion{}})
		}
		mdl := &out[len(out)-1]
		if e.Version == "" {
			mdl.State, mdl.Reason = string(e.State), e.Reason
			continue
		}
		v := ModelVersion{Version: e.Version, State: string(e.State), Reason: e.Reason}
		if !e.LoadedAt.IsZero() {
			v.LoadedAt = e.LoadedAt.UTC()
		}
		if e.State == modelrepo.StateReady {
			if md, err := a.m.Metadata(ctx, e.Name, e.Version); err == nil {
				mdl.Platform = md.Platform
				v.Label, v.GitCommit = md.Label, md.GitCommit
			}
		}
		if s, ok := byVersion[key{e.Name, e.Version}]; ok {
			v.InferenceCount, v.ExecutionCount = s.InferenceCount, s.ExecutionCount
			v.Successes, v.Failures = s.Success.Count, s.Fail.Count
			if s.LastInference > 0 {
				v.LastInference = time.UnixMilli(s.LastInference).UTC()
			}
			v.AvgQueueMS = avgMS(s.Queue)
			v.AvgComputeMS = avgMS(s.ComputeInfer)
		}
		mdl.Versions = append(mdl.Versions, v)
	}
	return out, nil
}

func avgMS(d modelrepo.Duration) float64 {
	if d.Count == 0 {
		return 0
	}
	return float64(d.Ns) / float64(d.Count) / 1e6
}
