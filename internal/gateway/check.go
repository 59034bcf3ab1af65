package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/infer"
)

// SignatureFunc returns the signature of a model version as the backend
// serves it ("" is the default version). An error wrapping
// ErrSignatureUnknown means it cannot be known now (a remote server that
// does not answer); Check then reports a warning, not a problem.
type SignatureFunc func(ctx context.Context, backend config.Backend, model, version string) (infer.Signature, error)

// ErrSignatureUnknown marks a signature that could not be looked up.
var ErrSignatureUnknown = errors.New("signature unknown")

// CheckResult is what Check found.
type CheckResult struct {
	Problems []error // the configuration cannot work
	Warnings []error // could not be checked
}

// Check validates every service of cfg against the real schemas: the
// features each input reads exist in the feature service with a type and
// width that fit a tensor; every model version a route can reach has the
// configured inputs with the same datatype and width (so every model a
// route names takes what the service builds: their signatures agree), needs no input the
// service does not build, and returns the outputs the answer and the
// fallback read; fallback rules type-check against the features' and
// fields' types. repo may be nil when no feature store is configured.
func Check(ctx context.Context, cfg *config.Gateway, repo *registry.Repo, sig SignatureFunc) CheckResult {
	var res CheckResult
	backends := map[string]config.Backend{}
	for _, b := range cfg.Backends {
		backends[b.Name] = b
	}
	for _, sc := range cfg.Services {
		s, err := compileService(sc, repo)
		if err != nil {
			res.Problems = append(res.Problems, err)
			continue
		}
		type target struct{ backend, model, version string }
		seen := map[target]bool{}
		for _, r := range sc.Routes {
			for _, w := range r.Route.Weighted {
				v := w.Version
				if v == "" {
					v = sc.Model.Version
				}
				model := cmp.Or(w.Model, sc.Model.Name)
				t := target{w.Backend, model, v}
				if seen[t] {
					continue
				}
				seen[t] = true
				b, ok := backends[w.Backend]
				if !ok || b.Kind == KindKServeHTTP {
					continue // config validation reports it
				}
				got, err := sig(ctx, b, model, v)
				where := fmt.Sprintf("service %q: model %q version %q on backend %q", sc.Name, model, orDefault(v), w.Backend)
				if errors.Is(err, ErrSignatureUnknown) {
					res.Warnings = append(res.Warnings, fmt.Errorf("%s: not checked: %w", where, err))
					continue
				}
				if err != nil {
					res.Problems = append(res.Problems, fmt.Errorf("%s: %w", where, err))
					continue
				}
				for _, p := range s.checkSignature(got) {
					res.Problems = append(res.Problems, fmt.Errorf("%s: %w", where, p))
				}
			}
		}
	}
	return res
}

func orDefault(v string) string {
	if v == "" {
		return "(default)"
	}
	return v
}

// checkSignature compares the service's tensor assembly and output
// mapping with a model signature.
func (s *service) checkSignature(sig infer.Signature) []error {
	var errs []error
	built := map[string]bool{}
	for i := range s.inputs {
		in := &s.inputs[i]
		built[in.tensor] = true
		j := slices.IndexFunc(sig.Inputs, func(t infer.TensorSpec) bool { return t.Name == in.tensor })
		if j < 0 {
			errs = append(errs, fmt.Errorf("input %q: the model has no such input (it has %s)", in.tensor, specNames(sig.Inputs)))
			continue
		}
		spec := sig.Inputs[j]
		if spec.DataType != in.dt {
			errs = append(errs, fmt.Errorf("input %q: datatype %s, but the model takes %s", in.tensor, in.dt, spec.DataType))
		}
		if w, ok := rowWidth(spec.Shape); ok && w != in.width {
			errs = append(errs, fmt.Errorf("input %q: the features and fields listed make %d values, but the model takes %d per row (shape %s)", in.tensor, in.width, w, spec.Shape))
		} else if !ok {
			errs = append(errs, fmt.Errorf("input %q: the model's shape %s is not [batch, N] or [N]; the gateway builds [1, %d]", in.tensor, spec.Shape, in.width))
		}
	}
	for _, spec := range sig.Inputs {
		if !built[spec.Name] {
			errs = append(errs, fmt.Errorf("the model needs input %q, which no gateway input builds", spec.Name))
		}
	}
	hasOut := func(n string) bool {
		return slices.ContainsFunc(sig.Outputs, func(t infer.TensorSpec) bool { return t.Name == n })
	}
	for _, o := range s.outputs {
		if !hasOut(o.from) {
			errs = append(errs, fmt.Errorf("output %q: the model has no output %q (it has %s)", o.name, o.from, specNames(sig.Outputs)))
		}
	}
	if fb := s.fallback; fb != nil {
		for _, n := range []string{fb.output, fb.confidence} {
			if !hasOut(n) {
				errs = append(errs, fmt.Errorf("fallback: the model has no output %q (it has %s)", n, specNames(sig.Outputs)))
			}
		}
	}
	return errs
}

// rowWidth is the number of values one request row fills in a tensor of
// shape: [-1, N...] (batched) or [1, N...]/[N...] (unbatched).
func rowWidth(shape infer.Shape) (int, bool) {
	dims := shape
	if len(dims) > 1 && (dims[0] == -1 || dims[0] == 1) {
		dims = dims[1:]
	}
	w := 1
	for _, d := range dims {
		if d < 1 {
			return 0, false
		}
		w *= int(d)
	}
	return w, true
}

func specNames(specs []infer.TensorSpec) string {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = fmt.Sprintf("%q", s.Name)
	}
	if len(names) == 0 {
		return "none"
	}
	return fmt.Sprint(names)
}
