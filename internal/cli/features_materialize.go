package cli

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-ml/sluice/internal/feature/materialize"
	"github.com/sluice-ml/sluice/internal/feature/online/connect"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/telemetry"
)

// materializeFlags are the flags both materialize commands share.
type materializeFlags struct {
	repo        string
	views       []string
	pushgateway string
	logLevel    string
	noProgress  bool
}

func (f *materializeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.repo, "repo", ".", "feature repository directory (holds feature_store.yaml)")
	cmd.Flags().StringSliceVarP(&f.views, "views", "v", nil, "feature views to materialize, comma separated or repeated as Feast's -v (default: all online views)")
	cmd.Flags().StringVar(&f.pushgateway, "pushgateway", "", "Prometheus Pushgateway URL to push each view's freshness gauges to")
	cmd.Flags().StringVar(&f.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	cmd.Flags().BoolVar(&f.noProgress, "no-progress", false, "do not show the per-view progress line")
}

// run opens the repository and its online store, runs fn with a
// Materializer and prints the report.
func (f *materializeFlags) run(cmd *cobra.Command, opts materialize.Options, fn func(*materialize.Materializer) (materialize.Report, error)) error {
	ctx := cmd.Context()
	logger, err := telemetry.NewLogger(cmd.ErrOrStderr(), telemetry.LogOptions{Format: "text", Level: f.logLevel})
	if err != nil {
		return err
	}
	repo, err := registry.Load(ctx, f.repo)
	if err != nil {
		return err
	}
	store, err := connect.Open(ctx, repo.Config.Online, repo.Project, repo.Dir, logger, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err := store.Close(); err != nil {
			logger.Warn("close online store", "err", err)
		}
	}()
	opts.Pushgateway = f.pushgateway
	if !f.noProgress {
		opts.Progress = cmd.ErrOrStderr()
	}
	rep, runErr := fn(materialize.New(repo, store, opts, logger, nil))
	printMaterializeReport(cmd.OutOrStdout(), rep)
	if runErr != nil {
		return &exitError{code: 1, err: runErr}
	}
	return nil
}

func newFeaturesMaterializeCmd() *cobra.Command {
	var f materializeFlags
	var overwrite bool
	var batch int
	cmd := &cobra.Command{
		Use:   "materialize START END",
		Short: "Load the latest row per entity in [START, END] into the online store",
		Long: `Load each feature view's latest row per entity with an event timestamp in
[START, END] from its offline source into the online store.

END is clamped to now. Runs are idempotent: a row replaces a stored one only
when it is newer (event timestamp, then created timestamp), so running a
window twice changes nothing and an older window never overwrites newer
values. --overwrite replaces stored rows regardless, to correct history.

Times are RFC 3339 (2026-03-01T12:00:00Z), ISO 8601 without a zone
(2026-03-01T12:00:00 or 2026-03-01 12:00, UTC), a date (2026-03-01, UTC),
"now", or now-DURATION / now+DURATION with units w, d, h, m, s
(now-10d, now-1w, now-1d12h).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			now := time.Now()
			start, err := parseMaterializeTime(args[0], now)
			if err != nil {
				return err
			}
			end, err := parseMaterializeTime(args[1], now)
			if err != nil {
				return err
			}
			return f.run(cmd, materialize.Options{BatchSize: batch}, func(m *materialize.Materializer) (materialize.Report, error) {
				return m.Run(cmd.Context(), start, end, f.views, overwrite)
			})
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "replace stored rows even when they are newer (corrects history; may move the watermark back)")
	cmd.Flags().IntVar(&batch, "batch-size", materialize.DefaultBatchSize, "rows per online store write")
	return cmd
}

func newFeaturesMaterializeIncrementalCmd() *cobra.Command {
	var f materializeFlags
	var overlap time.Duration
	var batch int
	cmd := &cobra.Command{
		Use:   "materialize-incremental END",
		Short: "Load new rows since each view's last materialization, up to END, into the online store",
		Long: `Materialize each feature view from where its last run ended (its watermark)
up to END (clamped to now). A view never materialized starts at now − ttl, or
52 weeks ago when it has no ttl. --late-overlap re-reads that much before the
watermark to pick up rows that arrived late; rows already stored are skipped.
END takes the forms materialize takes (2026-03-01T12:00:00, now, now-1h).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			end, err := parseMaterializeTime(args[0], time.Now())
			if err != nil {
				return err
			}
			opts := materialize.Options{BatchSize: batch, LateOverlap: overlap}
			return f.run(cmd, opts, func(m *materialize.Materializer) (materialize.Report, error) {
				return m.RunIncremental(cmd.Context(), end, f.views)
			})
		},
	}
	f.register(cmd)
	cmd.Flags().DurationVar(&overlap, "late-overlap", 0, "start this long before the watermark to pick up late rows")
	cmd.Flags().IntVar(&batch, "batch-size", materialize.DefaultBatchSize, "rows per online store write")
	return cmd
}

// materializeLayouts are the absolute times the materialize commands
// accept: RFC 3339 and the ISO 8601 forms Feast's CLI takes (it parses
// with dateutil), with "T" or a space, with or without seconds, fraction
// and zone (no zone is UTC, as Feast makes naive times UTC), and a date.
var materializeLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04Z07:00",
	"2006-01-02T15:04",
	"2006-01-02 15:04",
	time.DateOnly,
}

// parseMaterializeTime parses a command-line time: an absolute time
// (materializeLayouts), "now", or now-DURATION / now+DURATION where the
// duration may use days and weeks too (now-10d, now-1w2d, now-1d12h).
func parseMaterializeTime(s string, now time.Time) (time.Time, error) {
	if s == "now" {
		return now.UTC(), nil
	}
	if rest, ok := strings.CutPrefix(s, "now"); ok && rest != "" && (rest[0] == '-' || rest[0] == '+') {
		d, err := parseLongDuration(rest[1:])
		if err != nil {
			return time.Time{}, fmt.Errorf("invalid time '%s': want now-DURATION such as now-10d or now-24h: %w", s, err)
		}
		if rest[0] == '-' {
			d = -d
		}
		return now.UTC().Add(d), nil
	}
	for _, layout := range materializeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, errors.New("invalid time '" + s + "': want RFC 3339 (2026-03-01T12:00:00Z), a date (2026-03-01), now or now-DURATION (now-10d)")
}

// maxLongDuration bounds a relative time: about 290 years, what a
// time.Duration holds.
const maxLongDuration = time.Duration(math.MaxInt64)

// parseLongDuration parses a non-negative duration as Go does, plus the
// units d (24h) and w (7d): "10d", "1w2d", "1d12h30m", "90m".
func parseLongDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New("empty duration")
	}
	var total time.Duration
	for s != "" {
		i := 0
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			i++
		}
		j := i
		for j < len(s) && (s[j] < '0' || s[j] > '9') && s[j] != '.' {
			j++
		}
		if i == 0 || j == i {
			return 0, fmt.Errorf("%q is not a number followed by a unit", s)
		}
		num, unit := s[:i], s[i:j]
		var d time.Duration
		switch unit {
		case "d", "w":
			n, err := strconv.ParseFloat(num, 64)
			if err != nil {
				return 0, fmt.Errorf("%q: %w", num+unit, err)
			}
			day := float64(24 * time.Hour)
			if unit == "w" {
				day *= 7
			}
			if n*day >= float64(maxLongDuration) {
				return 0, fmt.Errorf("%s%s is too long", num, unit)
			}
			d = time.Duration(n * day)
		default:
			var err error
			if d, err = time.ParseDuration(num + unit); err != nil {
				return 0, err
			}
		}
		if d < 0 || total > maxLongDuration-d {
			return 0, errors.New("duration out of range")
		}
		total += d
		s = s[j:]
	}
	return total, nil
}

// printMaterializeReport prints one line per view.
func printMaterializeReport(w io.Writer, rep materialize.Report) {
	if len(rep.Views) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VIEW\tSTART\tEND\tROWS READ\tWRITTEN\tSKIPPED\tDURATION\tROWS/S\tNOTE")
	for _, v := range rep.Views {
		notes := []string{}
		if v.Note != "" {
			notes = append(notes, v.Note)
		}
		if v.SchemaChanged {
			notes = append(notes, "schema changed: whole window re-read")
		}
		if v.Future > 0 {
			notes = append(notes, fmt.Sprintf("%d future rows skipped", v.Future))
		}
		if v.Err != nil {
			notes = append(notes, "FAILED: "+v.Err.Error())
		}
		note := strings.Join(notes, "; ")
		if v.Start.IsZero() {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t%s\n", v.View, note)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%.0f\t%s\n", v.View,
			v.Start.UTC().Format(time.RFC3339), v.End.UTC().Format(time.RFC3339),
			v.RowsRead, v.Written, v.Skipped, v.Duration.Round(time.Millisecond), v.RowsPerSecond(), note)
	}
	_ = tw.Flush()
}
