package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sluice-ml/sluice/internal/config"
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
durations, regular expressions and fallback rule syntax. Static checks only.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := config.Load(file); err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), err)
				return &exitError{code: 1, err: fmt.Errorf("%s: invalid", file)}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok\n", file)
			return nil
		},
	}
	check.Flags().StringVarP(&file, "config", "c", "sluice.yaml", "config file to check")
	cmd.AddCommand(check)
	return cmd
}
