package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-ml/sluice/internal/feature/offline"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/telemetry"
)

func newFeaturesHistoricalCmd() *cobra.Command {
	var (
		repoDir, entities, service, out, tempDir, logLevel string
		features                                           []string
		memory                                             int64
	)
	cmd := &cobra.Command{
		Use:   "historical --entities FILE (--features view:feat,... | --feature-service NAME) -o OUT.parquet",
		Short: "Point-in-time join of entity rows with features, for training data",
		Long: `Join each entity row (join key columns and event_timestamp, from a .parquet or
.csv file; other columns are kept) with the feature values that were current
at its event_timestamp: per view, the row of the same keys with the latest
event timestamp in [event_timestamp - ttl, event_timestamp] (no lower bound
when the view's ttl is 0), ties broken by the created timestamp; no such row
gives nulls. The output keeps every entity row, in input order. Memory is
bounded: inputs are partitioned by entity key into temporary files.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			logger, err := telemetry.NewLogger(cmd.ErrOrStderr(), telemetry.LogOptions{Format: "text", Level: logLevel})
			if err != nil {
				return err
			}
			repo, err := registry.Load(ctx, repoDir)
			if err != nil {
				return err
			}
			refs, err := repo.ResolveFeatures(features, service)
			if err != nil {
				return err
			}
			started := time.Now()
			opts := offline.Options{TempDir: tempDir, MemoryBudget: memory << 20, Logger: logger}
			if err := offline.Historical(ctx, repo, entities, refs, out, opts); err != nil {
				return &exitError{code: 1, err: err}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s in %s\n", out, time.Since(started).Round(time.Millisecond))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&repoDir, "repo", ".", "feature repository directory (holds feature_store.yaml)")
	fl.StringVar(&entities, "entities", "", "entity rows: a .parquet or .csv file with the join keys and event_timestamp")
	fl.StringSliceVar(&features, "features", nil, "features as view:feature, comma separated")
	fl.StringVar(&service, "feature-service", "", "feature service whose features to join")
	fl.StringVarP(&out, "output", "o", "", "output Parquet file")
	fl.StringVar(&tempDir, "temp-dir", "", "folder for spill files (default: the system temporary folder)")
	fl.Int64Var(&memory, "memory-mb", 256, "rough memory budget for one join partition, in MiB")
	fl.StringVar(&logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	_ = cmd.MarkFlagRequired("entities")
	_ = cmd.MarkFlagRequired("output")
	cmd.MarkFlagsMutuallyExclusive("features", "feature-service")
	cmd.MarkFlagsOneRequired("features", "feature-service")
	return cmd
}
