package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-ml/sluice/internal/accuracy"
	"github.com/sluice-ml/sluice/internal/accuracy/accuracyspec"
	"github.com/sluice-ml/sluice/internal/accuracy/report"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/objstore"
	"github.com/sluice-ml/sluice/internal/release/record"
)

// newAccuracyCmd is `sluice accuracy`: import outcomes into a running
// gateway, show its online accuracy, and write the HTML report from the
// prediction log.
func newAccuracyCmd() *cobra.Command {
	var admin string
	var auth adminAuth
	cmd := &cobra.Command{
		Use:   "accuracy",
		Short: "Online accuracy: import outcomes, show the joined metrics, write the report",
	}
	cmd.PersistentFlags().StringVar(&admin, "admin", "http://127.0.0.1:9901", "the gateway's admin address")
	auth.register(cmd.PersistentFlags())

	var service string
	var opts accuracy.ImportOptions
	imp := &cobra.Command{
		Use:   "import FILE",
		Short: "Post the outcomes of a .jsonl, .csv or .parquet file (or s3://, gs://, as:// object) to the gateway (operate token)",
		Long: `Post the outcomes of a file to a running gateway's admin port, in batches
of up to 10000. A .jsonl file holds one outcome object per line, as
POST /v1/services/NAME/outcomes takes them; a .csv file has a header row and
a .parquet file flat columns: the key column (--key-column), the optional
time column (--time-column, RFC 3339 or a Parquet TIMESTAMP) and the
observed values (every other numeric column, by name).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if service == "" {
				return &usageError{cmd: cmd, err: fmt.Errorf("--service is required")}
			}
			client, err := auth.client(30 * time.Second)
			if err != nil {
				return err
			}
			totals := map[string]int{}
			post := func(outs []accuracy.Outcome) error {
				return postOutcomes(cmd.Context(), client, admin, service, outs, totals)
			}
			if objstore.IsURI(args[0]) {
				err = accuracy.ReadOutcomeObject(cmd.Context(), args[0], service, opts, post)
			} else {
				err = accuracy.ReadOutcomeFile(args[0], service, opts, post)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "joined %d, held %d, duplicate %d, too_late %d, invalid %d\n",
				totals["joined"], totals["held"], totals["duplicate"], totals["too_late"], totals["invalid"])
			return err
		},
	}
	imp.Flags().StringVar(&service, "service", "", "the service the outcomes belong to (required)")
	imp.Flags().StringVar(&opts.KeyColumn, "key-column", "key", "the business key's column (.csv, .parquet)")
	imp.Flags().StringVar(&opts.TimeColumn, "time-column", "time", "the observation time's column (.csv, .parquet)")

	status := &cobra.Command{
		Use:   "status [SERVICE]",
		Short: "Show each service's online accuracy per version and slice",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var all []accuracy.ServiceStatus
			if err := adminCall(cmd.Context(), &auth, http.MethodGet, admin, "/accuracy", &all); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, s := range all {
				if len(args) == 1 && s.Service != args[0] {
					continue
				}
				fmt.Fprintf(out, "%s (window %s)\n", s.Service, s.Window)
				for _, se := range s.Series {
					var ms []string
					for _, m := range []string{"mae", "rmse", "bias", "mape", "coverage", "accuracy", "log_loss", "brier", "auc"} {
						if v, ok := se.Metrics[m]; ok {
							ms = append(ms, fmt.Sprintf("%s %.4g", m, v))
						}
					}
					fmt.Fprintf(out, "  version %-6s %-14s %-24s pairs %-6d %s\n", se.Version, se.Output, se.Slice, se.Pairs, strings.Join(ms, "  "))
				}
			}
			return nil
		},
	}

	var logDir, cfgFile, out, since string
	rep := &cobra.Command{
		Use:   "report",
		Short: "Write the self-contained HTML report of the prediction log's joined pairs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := parseSince(since)
			if err != nil {
				return &usageError{cmd: cmd, err: err}
			}
			ro := report.Options{Service: service, Since: time.Now().Add(-d)}
			if cfgFile != "" {
				cfg, err := config.Load(cfgFile)
				if err != nil {
					return err
				}
				dir, outs := reportSettings(cfg, service)
				if logDir == "" {
					logDir = dir
				}
				ro.Outputs = outs
			}
			if logDir == "" {
				logDir = accuracyspec.DefaultLogDir
			}
			src, err := record.Open(cmd.Context(), logDir, record.ReadOptions{Service: service, SkipBad: true})
			if err != nil {
				return err
			}
			defer src.Close()
			r, err := report.Build(cmd.Context(), src, ro)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if out != "-" {
				f, err := os.Create(out)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			if err := report.WriteHTML(w, r); err != nil {
				return err
			}
			if out != "-" {
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s: %d joined pairs of %s\n", out, r.Pairs, r.Service)
			}
			return nil
		},
	}
	rep.Flags().StringVar(&service, "service", "", "the service (default: the first in the log)")
	rep.Flags().StringVarP(&cfgFile, "config", "c", "", "sluice.yaml: the log folder and the service's outputs")
	rep.Flags().StringVar(&logDir, "log", "", "the prediction log folder (default: gateway.accuracy.log.dir, else "+accuracyspec.DefaultLogDir+")")
	rep.Flags().StringVarP(&out, "output", "o", "accuracy-report.html", `the HTML file ("-": stdout)`)
	rep.Flags().StringVar(&since, "since", "7d", "how far back: 7d, 36h, 90m")
	cmd.AddCommand(imp, status, rep)
	return cmd
}

// parseSince reads 7d, 36h or 90m.
func parseSince(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		var days int
		if _, err := fmt.Sscanf(n, "%d", &days); err != nil || days <= 0 {
			return 0, fmt.Errorf("--since %q: want e.g. 7d, 36h or 90m", s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("--since %q: want e.g. 7d, 36h or 90m", s)
	}
	return d, nil
}

// reportSettings takes the prediction log folder and the service's
// outputs from the configuration.
func reportSettings(cfg *config.Config, service string) (string, []report.Output) {
	if cfg.Gateway == nil {
		return "", nil
	}
	dir := ""
	if a := cfg.Gateway.Accuracy; a != nil {
		dir = a.Log.Dir
	}
	for _, s := range cfg.Gateway.Services {
		if s.Accuracy == nil || (service != "" && s.Name != service) {
			continue
		}
		var outs []report.Output
		for _, o := range s.Accuracy.Outputs {
			outs = append(outs, report.Output{Name: o.Name, Observed: o.Observed, Kind: o.Kind})
		}
		return dir, outs
	}
	return dir, nil
}

// postOutcomes posts one batch to the admin port and adds the results to
// totals.
func postOutcomes(ctx context.Context, client *http.Client, admin, service string, outs []accuracy.Outcome, totals map[string]int) error {
	type wire struct {
		Key    string             `json:"key"`
		Values map[string]float64 `json:"values"`
		Time   string             `json:"time,omitempty"`
	}
	body := make([]wire, len(outs))
	for i, o := range outs {
		body[i] = wire{Key: o.Key, Values: o.Values}
		if !o.Time.IsZero() {
			body[i].Time = o.Time.UTC().Format(time.RFC3339Nano)
		}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	if !strings.Contains(admin, "://") {
		admin = "http://" + admin
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(admin, "/")+"/accuracy/"+url.PathEscape(service)+"/outcomes", bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s: %s", req.URL.Path, resp.Status, bytes.TrimSpace(data))
	}
	var a struct {
		Counts map[string]int `json:"counts"`
	}
	if err := json.Unmarshal(data, &a); err != nil {
		return fmt.Errorf("POST %s: %w", req.URL.Path, err)
	}
	for k, v := range a.Counts {
		totals[k] += v
	}
	return nil
}
