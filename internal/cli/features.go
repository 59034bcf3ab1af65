package cli

import "github.com/spf13/cobra"

// newFeaturesCmd is the `sluice features` group: feature repository
// commands (plan, apply, list, describe, materialize, historical
// retrieval). Each
// subcommand lives in its own file and is added here.
func newFeaturesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "features",
		Short: "Work with a feature repository (Feast-style definitions in YAML)",
	}
	cmd.AddCommand(newFeaturesPlanCmd(), newFeaturesApplyCmd(), newFeaturesListCmd(), newFeaturesDescribeCmd(),
		newFeaturesHistoricalCmd(), newFeaturesMaterializeCmd(), newFeaturesMaterializeIncrementalCmd(), newFeaturesAggregateCmd())
	return cmd
}
