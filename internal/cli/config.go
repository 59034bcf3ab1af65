package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/kserve"
	"github.com/sluice-ml/sluice/internal/modelconfig"
)

// newConfigCmd returns "sluice config" and its subcommands.
func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Work with sluice.yaml",
	}
	var file string
	check := &cobra.Command{
		Use:   "check -c FILE",
		Short: "Validate a sluice.yaml and report every problem with file:line:col",
		Long: `Validate a sluice.yaml: strict schema (unknown keys are errors), ${ENV}
expansion, references between services, routes and backends, weights, ranges,
durations, regular expressions and fallback rule syntax; then each service
against the real schemas: the feature repository's feature services and
types, and the models' inputs and outputs (config.pbtxt in the model
repository for in_process backends, ModelMetadata from the endpoints of
kserve_grpc backends; an endpoint that does not answer is a warning).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// One pass: the schema and validation problems, then (on what
			// could be read) the services against the features and models.
			cfg, err := config.LoadForCheck(file)
			n := 0
			var seen []string // the messages printed, so the service check does not repeat them
			if err != nil {
				for _, e := range leaves(err) {
					fmt.Fprintln(cmd.ErrOrStderr(), e)
					n++
					if fe, ok := errors.AsType[*config.FieldError](e); ok {
						seen = append(seen, fe.Msg)
					}
				}
			}
			if cfg != nil && cfg.Gateway != nil {
				n += checkSchemas(cmd.Context(), cfg, cmd, seen)
			}
			if n > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%s: invalid (%s)", file, nouns(n, "problem", "problems"))}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok\n", file)
			return nil
		},
	}
	check.Flags().StringVarP(&file, "config", "c", "sluice.yaml", "config file to check")
	cmd.AddCommand(check)
	return cmd
}

// checkSchemas checks the gateway's services against the feature
// repository and the models, without starting anything, prints each
// problem at its place in the config file, and returns how many it found.
// Problems whose message ends with one of seen were reported already.
func checkSchemas(ctx context.Context, cfg *config.Config, cmd *cobra.Command, seen []string) (problems int) {
	out := cmd.ErrOrStderr()
	defer func() {
		// The services are checked even when the file has other problems;
		// a config too broken for the check is reported, not a crash.
		if r := recover(); r != nil {
			fmt.Fprintln(out, "config check: the services were not checked against the features and models; fix the problems above first")
			problems++
		}
	}()
	var repo *registry.Repo
	if fc := cfg.FeatureServer; fc != nil && fc.Repo != "" {
		r, err := registry.Load(cmd.Context(), fc.Repo)
		if errs, ok := errors.AsType[registry.Errors](err); ok {
			for _, e := range errs {
				fmt.Fprintln(out, e.Error())
			}
			return len(errs)
		}
		if err != nil {
			fmt.Fprintln(out, cfg.Problem("feature_server.repo", err))
			return 1
		}
		repo = r
	}
	remote := kserve.New(kserve.Options{}, nil)
	defer remote.Close()
	sig := func(ctx context.Context, b config.Backend, model, version string) (infer.Signature, error) {
		if b.Kind != "in_process" {
			return remoteSignature(ctx, remote, b, model, version)
		}
		if cfg.ModelServer == nil {
			return infer.Signature{}, errors.New("backend is in_process but there is no model_server section")
		}
		return repoSignature(cfg.ModelServer.ModelRepository, model, version)
	}
	for i, sc := range cfg.Gateway.Services {
		one := *cfg.Gateway
		one.Services = []config.Service{sc}
		res := gateway.Check(ctx, &one, repo, sig)
		for _, w := range res.Warnings {
			fmt.Fprintln(out, "warning:", cfg.Problem(servicePath(i, sc, w), w))
		}
		for _, p := range res.Problems {
		leaf:
			for _, e := range leaves(p) {
				for _, m := range seen {
					if strings.HasSuffix(e.Error(), m) {
						continue leaf
					}
				}
				fmt.Fprintln(out, cfg.Problem(servicePath(i, sc, e), e))
				problems++
			}
		}
	}
	return problems
}

// leaves flattens errors.Join trees, also under a wrapping prefix ("service
// \"x\": " + joined), keeping each leaf's prefix.
func leaves(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leaves(e)...)
		}
		return out
	}
	if inner := errors.Unwrap(err); inner != nil {
		if j, ok := inner.(interface{ Unwrap() []error }); ok {
			prefix := strings.TrimSuffix(err.Error(), inner.Error())
			var out []error
			for _, e := range j.Unwrap() {
				for _, l := range leaves(e) {
					out = append(out, fmt.Errorf("%s%w", prefix, l))
				}
			}
			return out
		}
	}
	return []error{err}
}

// servicePath is the config path a problem of service i is about, from the
// names its message quotes: an input's feature, an input, an output, a
// request field, an entity, the feature service, the fallback or the
// model; else the service itself.
func servicePath(i int, sc config.Service, err error) string {
	msg := err.Error()
	base := fmt.Sprintf("gateway.services[%d]", i)
	has := func(name string) bool { return name != "" && strings.Contains(msg, strconv.Quote(name)) }
	for j, in := range sc.Inputs {
		if !has(in.Tensor) {
			continue
		}
		for k, f := range in.Features {
			if has(f) {
				return fmt.Sprintf("%s.inputs[%d].features[%d]", base, j, k)
			}
		}
		return fmt.Sprintf("%s.inputs[%d]", base, j)
	}
	for j, o := range sc.Outputs {
		if strings.Contains(msg, "output "+strconv.Quote(o.Name)) {
			return fmt.Sprintf("%s.outputs[%d]", base, j)
		}
	}
	for j, f := range sc.RequestFields {
		if strings.Contains(msg, "request field "+strconv.Quote(f.Name)) {
			return fmt.Sprintf("%s.request_fields[%d]", base, j)
		}
	}
	for j, e := range sc.Entities {
		if strings.Contains(msg, "entity "+strconv.Quote(e.Name)) {
			return fmt.Sprintf("%s.entities[%d]", base, j)
		}
	}
	switch {
	case strings.Contains(msg, "feature_service") || strings.Contains(msg, "feature service"):
		return base + ".feature_service"
	case strings.Contains(msg, "fallback"):
		return base + ".fallback"
	case strings.Contains(msg, "model "+strconv.Quote(sc.Model.Name)):
		return base + ".model"
	}
	return base
}

// repoSignature reads a model's signature from its config.pbtxt in the
// first repository holding it, and checks that the version exists there.
func repoSignature(repos []string, model, version string) (infer.Signature, error) {
	for _, r := range repos {
		dir := filepath.Join(r, model)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		if version != "" {
			if _, err := os.Stat(filepath.Join(dir, version)); err != nil {
				return infer.Signature{}, fmt.Errorf("version %s is not in %s", version, dir)
			}
		}
		path := filepath.Join(dir, "config.pbtxt")
		data, err := os.ReadFile(path)
		if err != nil {
			return infer.Signature{}, fmt.Errorf("%w: %s has no config.pbtxt (its signature comes from the model file at load time)", gateway.ErrSignatureUnknown, dir)
		}
		mc, _, err := modelconfig.Parse(path, data)
		if err != nil {
			return infer.Signature{}, err
		}
		modelconfig.ApplyDefaults(mc, model)
		return modelconfig.ClientSignature(mc), nil
	}
	return infer.Signature{}, fmt.Errorf("model %q is in none of the model repositories %v", model, repos)
}
