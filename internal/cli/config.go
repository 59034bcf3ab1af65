package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

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
			cfg, err := config.Load(file)
			if err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), err)
				return &exitError{code: 1, err: fmt.Errorf("%s: invalid", file)}
			}
			if cfg.Gateway != nil {
				if err := checkSchemas(cmd.Context(), cfg, cmd); err != nil {
					return err
				}
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
// repository and the models, without starting anything.
func checkSchemas(ctx context.Context, cfg *config.Config, cmd *cobra.Command) error {
	var repo *registry.Repo
	if fc := cfg.FeatureServer; fc != nil {
		r, err := loadFeatureRepo(cmd, fc.Repo, cmd.ErrOrStderr())
		if err != nil {
			return err
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
	return checkGateway(ctx, cfg, repo, sig, cmd.ErrOrStderr())
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
