package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-ml/sluice/internal/release/rollout"
)

// newRolloutCmd returns "sluice rollout": the staged rollouts of a running
// gateway, through its admin API.
func newRolloutCmd() *cobra.Command {
	var admin string
	var auth adminAuth
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Show and steer the staged rollouts of a running gateway (its admin API)",
	}
	cmd.PersistentFlags().StringVar(&admin, "admin", "http://127.0.0.1:9901", "the gateway's admin address")
	auth.register(cmd.PersistentFlags())
	status := &cobra.Command{
		Use:   "status [SERVICE]",
		Short: "Show each rollout's stage, gates and history",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var all []rollout.Status
			if err := adminCall(cmd.Context(), &auth, http.MethodGet, admin, "/rollout", &all); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			shown := 0
			for i := range all {
				if len(args) == 1 && all[i].Service != args[0] {
					continue
				}
				writeRolloutStatus(out, &all[i])
				shown++
			}
			switch {
			case shown == 0 && len(all) == 0:
				// Nothing is rolling out: an answer, not a failure.
				fmt.Fprintln(out, "No rollouts: no service of this gateway has a rollout block.")
			case shown == 0:
				return &exitError{code: 1, err: fmt.Errorf("no rollout%s", forService(args))}
			}
			return nil
		},
	}
	cmd.AddCommand(status)
	for _, action := range []struct{ name, short string }{
		{"promote", "Move the rollout to its next stage now"},
		{"rollback", "Send every request to the stable version"},
		{"pause", "Stop promotions (failing gates still roll back)"},
		{"resume", "Resume a paused rollout"},
		{"reset", "Start the rollout again from its first stage"},
	} {
		var reason string
		c := &cobra.Command{
			Use:   action.name + " SERVICE",
			Short: action.short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				q := ""
				if reason != "" {
					q = "?reason=" + url.QueryEscape(reason)
				}
				var st rollout.Status
				if err := adminCall(cmd.Context(), &auth, http.MethodPost, admin, "/rollout/"+url.PathEscape(args[0])+"/"+action.name+q, &st); err != nil {
					return err
				}
				writeRolloutStatus(cmd.OutOrStdout(), &st)
				return nil
			},
		}
		c.Flags().StringVar(&reason, "reason", "", "why, recorded in the rollout's history")
		cmd.AddCommand(c)
	}
	return cmd
}

func forService(args []string) string {
	if len(args) == 1 {
		return " for service " + args[0]
	}
	return ""
}

// adminCall calls the admin API and decodes its JSON answer into out; an
// error answer becomes an error carrying its reason.
func adminCall(ctx context.Context, auth *adminAuth, method, admin, path string, out any) error {
	if !strings.Contains(admin, "://") {
		admin = "http://" + admin
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(admin, "/")+path, nil)
	if err != nil {
		return err
	}
	client, err := auth.client(10 * time.Second)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	resp, err := client.Do(req)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("admin API: %w", err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error, Reason string }
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return &exitError{code: 1, err: fmt.Errorf("%s (%s)", e.Error, e.Reason)}
		}
		return &exitError{code: 1, err: fmt.Errorf("admin API %s %s: %s", method, path, resp.Status)}
	}
	return json.Unmarshal(body, out)
}

// writeRolloutStatus prints one rollout for people.
func writeRolloutStatus(w io.Writer, s *rollout.Status) {
	fmt.Fprintf(w, "%s: %s, stage %d %q since %s (stable %s → candidate %s)\n",
		s.Service, s.State, s.Stage+1, s.StageName, s.StageSince.Format(time.RFC3339), s.Stable.Version, s.Candidate.Version)
	if r := s.Reason; r != nil {
		fmt.Fprintf(w, "  rolled back: %s\n", r.Message)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, g := range s.Groups {
		for _, gv := range g.Gates {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%.4g\t(limit %.4g, %d requests)\n", g.Name, gv.Gate, gv.Status, gv.Value, gv.Threshold, gv.Requests)
		}
	}
	_ = tw.Flush()
	n := len(s.History)
	for _, t := range s.History[max(0, n-5):] {
		fmt.Fprintf(w, "  %s %s → %s: %s\n", t.Time.Format(time.RFC3339), t.Kind, t.To, t.Reason)
	}
}
