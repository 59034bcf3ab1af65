package cli

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/sluice-ml/sluice/internal/modelrepo"
)

func newRepoCmd() *cobra.Command {
	repo := &cobra.Command{Use: "repo", Short: "Work with model repositories"}
	var strict bool
	var backendConfig []string
	check := &cobra.Command{
		Use:   "check DIR|URI...",
		Short: "Validate model repositories (folders or s3://, gs://, as:// locations) without serving them and print every problem as path:line:col: message",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, dirs []string) error {
			settings, err := backendSettings(backendConfig)
			if err != nil {
				return err
			}
			logger := slog.New(slog.DiscardHandler)
			backends, closeBackends, err := newBackends(settings, logger, nil)
			if err != nil {
				return err
			}
			defer func() { _ = closeBackends() }()
			problems := modelrepo.Check(cmd.Context(), dirs, backends, strict)
			out := cmd.OutOrStdout()
			for _, p := range problems {
				fmt.Fprintln(out, p.Error())
			}
			if len(problems) > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d problem(s) found", len(problems))}
			}
			fmt.Fprintln(out, "ok: no problems found")
			return nil
		},
	}
	check.Flags().BoolVar(&strict, "strict-model-config", false, "require complete config.pbtxt files (no auto-complete)")
	check.Flags().StringArrayVar(&backendConfig, "backend-config", nil, "backend setting as <backend>,<setting>=<value>")
	repo.AddCommand(check)
	return repo
}
