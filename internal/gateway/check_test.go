package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/infer"
)

// etaSignature is the signature etaService's inputs and outputs fit:
// user [-1, 7] FP32, route [-1, 3] FP64, flags [-1, 2] INT32.
func etaSignature() infer.Signature {
	return infer.Signature{
		Inputs: []infer.TensorSpec{
			{Name: "user", DataType: infer.FP32, Shape: infer.Shape{-1, 7}},
			{Name: "route", DataType: infer.FP64, Shape: infer.Shape{-1, 3}},
			{Name: "flags", DataType: infer.Int32, Shape: infer.Shape{-1, 2}},
		},
		Outputs: []infer.TensorSpec{
			{Name: "eta_prediction", DataType: infer.FP32, Shape: infer.Shape{-1, 1}},
			{Name: "confidence_score", DataType: infer.FP32, Shape: infer.Shape{-1, 1}},
		},
	}
}

// sigs answers Check's signature look-ups from a map keyed by
// "backend/model/version" and records the look-ups.
type sigs struct {
	m      map[string]infer.Signature
	errs   map[string]error
	lookup []string
}

func (s *sigs) get(_ context.Context, b config.Backend, model, version string) (infer.Signature, error) {
	k := b.Name + "/" + model + "/" + version
	s.lookup = append(s.lookup, k)
	if err := s.errs[k]; err != nil {
		return infer.Signature{}, err
	}
	sig, ok := s.m[k]
	if !ok {
		return infer.Signature{}, fmt.Errorf("no model %s", k)
	}
	return sig, nil
}

func TestCheck(t *testing.T) {
	repo := loadRepo(t)
	twoVersions := `[{name: canary, match: {headers: [{name: x-canary, exact: "true"}]}, route: {weighted: [{backend: local, version: "2", weight: 100}]}},
        {name: default, route: {weighted: [{backend: local, weight: 90}, {backend: local, version: "2", weight: 10}]}}]`
	tests := []struct {
		name     string
		opts     yamlOpts
		sig      func(infer.Signature) infer.Signature // changes version 2's signature
		lookupEr error                                 // for version 2
		problems []string                              // substrings, one per problem
		warnings int
	}{
		{name: "fits", opts: yamlOpts{routes: twoVersions}},
		{name: "fallback outputs fit", opts: yamlOpts{service: []string{fallbackYAML}}},
		{
			name: "wrong datatype and width", opts: yamlOpts{routes: twoVersions},
			sig: func(s infer.Signature) infer.Signature {
				s.Inputs[0] = infer.TensorSpec{Name: "user", DataType: infer.FP64, Shape: infer.Shape{-1, 8}}
				return s
			},
			problems: []string{`input "user": datatype FP32, but the model takes FP64`, `input "user": the features and fields listed make 7 values, but the model takes 8`},
		},
		{
			name: "input the gateway does not build", opts: yamlOpts{routes: twoVersions},
			sig: func(s infer.Signature) infer.Signature {
				s.Inputs = append(s.Inputs, infer.TensorSpec{Name: "extra", DataType: infer.FP32, Shape: infer.Shape{-1, 1}})
				return s
			},
			problems: []string{`the model needs input "extra"`},
		},
		{
			name: "input the model lacks and a missing output", opts: yamlOpts{routes: twoVersions},
			sig: func(s infer.Signature) infer.Signature {
				s.Inputs = s.Inputs[:2]
				s.Outputs = s.Outputs[:1]
				return s
			},
			problems: []string{`input "flags": the model has no such input`, `output "confidence": the model has no output "confidence_score"`},
		},
		{
			name: "unbatched shapes", opts: yamlOpts{routes: twoVersions},
			sig: func(s infer.Signature) infer.Signature {
				s.Inputs[0].Shape = infer.Shape{7}
				s.Inputs[1].Shape = infer.Shape{1, 3}
				return s
			},
		},
		{
			name: "unknown signature is a warning", opts: yamlOpts{routes: twoVersions},
			lookupEr: fmt.Errorf("10.0.0.9:8001: %w", gateway.ErrSignatureUnknown),
			warnings: 1,
		},
		{
			name: "a feature the repository lacks", opts: yamlOpts{inputs: "[{tensor: user, features: [user_stats:tripz]}]"},
			problems: []string{`"user_stats:tripz" is not in feature service "eta"`},
		},
		{
			name: "a string field in a tensor", opts: yamlOpts{inputs: "[{tensor: user, features: [user_stats:trips, field:note]}]"},
			problems: []string{`field "note" is a string`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.gateway = []string{anonAllowed}
			cfg := parseConfig(t, gatewayYAML(tt.opts))
			s := &sigs{m: map[string]infer.Signature{"local/eta_model/1": etaSignature(), "local/eta_model/2": etaSignature()}, errs: map[string]error{}}
			if tt.sig != nil {
				s.m["local/eta_model/2"] = tt.sig(etaSignature())
			}
			if tt.lookupEr != nil {
				s.errs["local/eta_model/2"] = tt.lookupEr
			}
			res := gateway.Check(context.Background(), cfg.Gateway, repo, s.get)
			var got []string
			for _, p := range res.Problems {
				got = append(got, p.Error())
			}
			require.Len(t, got, len(tt.problems), "problems:\n%s", strings.Join(got, "\n"))
			for _, want := range tt.problems {
				require.Contains(t, strings.Join(got, "\n"), want)
			}
			if tt.sig != nil {
				for _, p := range got {
					require.Contains(t, p, `service "eta": model "eta_model" version "2" on backend "local"`, "a problem names where it is")
				}
			}
			require.Len(t, res.Warnings, tt.warnings, "warnings: %v", res.Warnings)
			for _, w := range res.Warnings {
				require.True(t, errors.Is(w, gateway.ErrSignatureUnknown))
			}
		})
	}
}

func TestCheckLooksUpEachTargetOnce(t *testing.T) {
	cfg := parseConfig(t, gatewayYAML(yamlOpts{gateway: []string{anonAllowed}, routes: `[
        {name: a, match: {headers: [{name: x-a, present: true}]}, route: {weighted: [{backend: local, weight: 100}]}},
        {name: b, route: {weighted: [{backend: local, version: "1", weight: 50}, {backend: local, version: "2", weight: 50}]}}]`}))
	s := &sigs{m: map[string]infer.Signature{"local/eta_model/1": etaSignature(), "local/eta_model/2": etaSignature()}}
	res := gateway.Check(context.Background(), cfg.Gateway, loadRepo(t), s.get)
	require.Empty(t, res.Problems)
	require.ElementsMatch(t, []string{"local/eta_model/1", "local/eta_model/2"}, s.lookup,
		"route a's default version is the model's version 1, looked up once")
}
