// Package accuracylog is the gateway's online-accuracy log, a release hook
// (release.Hook): a service with an accuracy block offers a share of its
// answered predictions to the accuracy joiner (internal/accuracy), which
// joins the outcomes posted later.
package accuracylog

import (
	"context"

	"github.com/sluice-ml/sluice/internal/accuracy"
	"github.com/sluice-ml/sluice/internal/accuracy/accuracyspec"
	"github.com/sluice-ml/sluice/internal/gateway/release"
	"github.com/sluice-ml/sluice/internal/gateway/route"
)

// Kind is the accuracy log's hook kind.
const Kind = "accuracy"

// Joiner takes the logged predictions (accuracy.Joiner).
type Joiner interface {
	// Offer logs a prediction; it never blocks.
	Offer(p *accuracy.Prediction, features map[string]any) bool
}

// Log is the release hook of a service with an accuracy block. It holds
// no state of its own (the joiner is its owner's) and is made anew with
// each configuration.
type Log struct {
	release.Base
	cfg accuracyspec.Service
	j   Joiner
}

// Factory makes the services' accuracy logs, all feeding j; a nil j logs
// nothing (the gateway refuses an accuracy block without a joiner).
func Factory(j Joiner) release.Factory {
	return func(svc release.Service, _ release.Hook) (release.Hook, error) {
		a := svc.Config().Accuracy
		if a == nil || j == nil {
			return nil, nil
		}
		return &Log{cfg: *a, j: j}, nil
	}
}

// Kind is "accuracy".
func (l *Log) Kind() string { return Kind }

// Answered offers the call's prediction to the joiner when it falls in
// the accuracy share: the hash of the key field's value (else the request
// id) decides, as for a shadow.
func (l *Log) Answered(_ context.Context, c release.Call) {
	key := c.RequestID()
	if l.cfg.Key != "" {
		if v, ok := c.Field(l.cfg.Key); ok {
			key = v
		}
	}
	if l.cfg.Percent < 100 && !route.InShare(key, l.cfg.Percent) {
		return
	}
	ans := c.Answer()
	outs := make(map[string]float64, len(ans.Outputs))
	for _, o := range ans.Outputs {
		if len(o.Values) > 0 {
			outs[o.Name] = o.Values[0]
		}
	}
	group, _ := c.Group()
	p := &accuracy.Prediction{
		Service: c.Service(), Key: key, RequestID: c.RequestID(), Model: ans.Model, Version: ans.Version,
		Route: ans.Route, Group: group, Slices: release.KeepHeaders(c.Header(), l.cfg.Slices), Outputs: outs, Time: c.Start(),
		Client: c.ClientID(),
	}
	var feats map[string]any
	if l.cfg.Features {
		feats = c.FeatureMap()
	}
	l.j.Offer(p, feats)
}
