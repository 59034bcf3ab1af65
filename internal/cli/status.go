package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/console"
	"github.com/sluice-ml/sluice/internal/gateway/accesslog"
)

// statusFlags are `sluice status`'s flags.
type statusFlags struct {
	admin   string
	timeout time.Duration
	json    bool
	auth    adminAuth
}

// newStatusCmd is `sluice status`: a one-screen health summary of a running
// deployment, read from its admin API.
func newStatusCmd() *cobra.Command {
	f := &statusFlags{}
	cmd := &cobra.Command{
		Use:   "status [--admin URL]",
		Short: "Print a one-screen health summary of a running Sluice from its admin API",
		Long: `status reads a running Sluice's admin port (gateway.admin in sluice.yaml) and
prints, on one screen, whether it is ready, which model versions serve and
which failed to load (with the reason), how fresh each online feature view is
against its ttl, each service's routes, rollout, shadow, breaker and fallback,
the endpoints' health, the latest failed request, and every problem found.

Models, feature views and recent errors come from the web console's JSON API
(/console/api/...) on the same port; the gateway's state from its admin API
(/routes, /endpoints, /breakers, /fallback, /rollout, /shadow, /ready).

Exit status: 0 healthy (warnings allowed), 1 a critical problem (not ready,
a model version that failed to load, a stale view, an open feature breaker,
a backend with no routable endpoint), 2 the admin API cannot be read.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runStatus(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.admin, "admin", "http://127.0.0.1:9901", "the admin API's base URL (gateway.admin)")
	fl.DurationVar(&f.timeout, "timeout", 5*time.Second, "how long to wait for the admin API")
	fl.BoolVar(&f.json, "json", false, "print the summary and the details as JSON")
	f.auth.register(fl)
	return cmd
}

// statusReport is what status gathers; --json prints it.
type statusReport struct {
	Admin   string           `json:"admin"`
	Summary console.Summary  `json:"summary"`
	Models  []console.Model  `json:"models,omitempty"`
	Views   []console.View   `json:"views,omitempty"`
	Gateway *console.Gateway `json:"gateway,omitempty"`
	// Console is false when the admin port serves no console, so models,
	// views and errors are unknown.
	Console bool `json:"console"`
}

func runStatus(ctx context.Context, out io.Writer, f *statusFlags) error {
	base := strings.TrimRight(f.admin, "/")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		base = "http://" + base
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	client, err := f.auth.client(f.timeout)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	rep, err := gatherStatus(ctx, client, base)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if f.json {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", b)
		if err != nil {
			return err
		}
	} else {
		writeStatus(out, rep)
	}
	if !rep.Summary.Healthy() {
		return &exitError{code: 1, err: errors.New("the deployment has critical problems")}
	}
	return nil
}

// gatherStatus reads the admin API at base. It fails only when nothing
// answers; a part that cannot be read becomes a problem in the summary.
func gatherStatus(ctx context.Context, client *http.Client, base string) (*statusReport, error) {
	rep := &statusReport{Admin: base}
	in := console.Inputs{HaveGateway: true}
	in.Gateway, in.GatewayErr = console.GatewayFromURL(client, base).Gateway(ctx)
	if in.GatewayErr != nil {
		// Is anything there at all?
		if _, _, err := console.Fetch(ctx, client, base+"/ready"); err != nil {
			return nil, fmt.Errorf("cannot reach the admin API at %s: %w", base, err)
		}
	}
	rep.Gateway = in.Gateway

	var models struct {
		Models []console.Model `json:"models"`
	}
	ok, present, err := consoleAPI(ctx, client, base+console.Prefix+"api/models", &models)
	rep.Console = rep.Console || present
	if ok || err != nil {
		in.HaveModels, in.Models, in.ModelsErr = true, models.Models, err
	}
	var views struct {
		Views []console.View `json:"views"`
	}
	ok, present, err = consoleAPI(ctx, client, base+console.Prefix+"api/features", &views)
	rep.Console = rep.Console || present
	if ok || err != nil {
		in.HaveViews, in.Views, in.ViewsErr = true, views.Views, err
	}
	var errs struct {
		Seen   uint64            `json:"seen"`
		Errors []accesslog.Entry `json:"errors"`
	}
	ok, present, _ = consoleAPI(ctx, client, base+console.Prefix+"api/errors?n=1", &errs)
	rep.Console = rep.Console || present
	if ok {
		in.Errors, in.ErrorsSeen = errs.Errors, &errs.Seen
	}
	rep.Models, rep.Views = in.Models, in.Views
	rep.Summary = console.Summarize(in, time.Now())
	return rep, nil
}

// consoleAPI GETs a console API path into v. ok says v was filled;
// present says the console answered (possibly that the process does not
// run that part); err is a failure worth reporting.
func consoleAPI(ctx context.Context, client *http.Client, url string, v any) (ok, present bool, err error) {
	code, b, err := console.Fetch(ctx, client, url)
	if err != nil {
		return false, false, err
	}
	msg, reason, isJSON := apierr.ParseError(b)
	switch {
	case code == http.StatusOK:
		if err := json.Unmarshal(b, v); err != nil {
			return false, true, fmt.Errorf("%s: %w", url, err)
		}
		return true, true, nil
	case code == http.StatusNotFound && isJSON && reason == "not_running":
		return false, true, nil
	case code == http.StatusNotFound:
		return false, false, nil // no console on this port
	case isJSON && msg != "":
		return false, true, errors.New(msg)
	}
	return false, true, fmt.Errorf("%s: status %d", url, code)
}

// versionText is one version in the MODELS list: "v2 READY since 10:42
// (3h ago)" (the time in the local zone, with the date when it is not
// today's).
func versionText(v console.ModelVersion, now time.Time) string {
	out := "v" + clean(v.Version) + " " + clean(v.State)
	if v.LoadedAt.IsZero() {
		return out
	}
	at := v.LoadedAt.Local()
	layout := "15:04"
	if y, m, d := at.Date(); y != now.Local().Year() || m != now.Local().Month() || d != now.Local().Day() {
		layout = "2006-01-02 15:04"
	}
	return out + " since " + at.Format(layout) + " (" + ago(now, v.LoadedAt) + " ago)"
}

// writeStatus prints the report on one screen.
func writeStatus(w io.Writer, rep *statusReport) {
	s := &rep.Summary
	crit, warn := 0, 0
	for _, p := range s.Problems {
		if p.Severity == console.SeverityCritical {
			crit++
		} else {
			warn++
		}
	}
	verdict := "HEALTHY"
	switch {
	case !s.Healthy():
		verdict = "DEGRADED"
	case warn > 0:
		verdict = "HEALTHY, with warnings"
	}
	fmt.Fprintf(w, "Sluice at %s: %s (%d critical, %s)\n\n", clean(rep.Admin), verdict, crit, plural(warn, "warning"))

	writeStatusSummary(w, rep)
	if len(rep.Models) > 0 {
		fmt.Fprintln(w, "\nMODELS")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, m := range rep.Models {
			var vs []string
			var n uint64
			for _, v := range m.Versions {
				vs = append(vs, versionText(v, s.Time))
				n += v.InferenceCount
			}
			if len(vs) == 0 {
				vs = append(vs, clean(m.State))
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d inferences\n", clean(m.Name), strings.Join(vs, "  "), n)
		}
		_ = tw.Flush()
	}
	if len(rep.Views) > 0 {
		fmt.Fprintln(w, "\nFEATURE VIEWS")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, v := range rep.Views {
			state, fresh, hot := viewText(v, s.Time)
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", clean(v.Name), state, fresh, hot)
		}
		_ = tw.Flush()
	}
	if g := rep.Gateway; g != nil && len(g.Services) > 0 {
		fmt.Fprintln(w, "\nSERVICES")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, svc := range g.Services {
			routes, extra := serviceText(svc)
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", clean(svc.Name), strings.Join(routes, " | "), strings.Join(extra, " · "))
		}
		_ = tw.Flush()
	}
	if len(s.Problems) > 0 {
		fmt.Fprintln(w, "\nPROBLEMS")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, p := range s.Problems {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", p.Severity, clean(p.Area), clean(p.Subject), truncate(clean(p.Message), 160))
		}
		_ = tw.Flush()
	}
}

// writeStatusSummary prints the report's one line per component.
func writeStatusSummary(w io.Writer, rep *statusReport) {
	s := &rep.Summary
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if g := rep.Gateway; g != nil {
		ready := "ready"
		if !g.Ready {
			ready = "NOT READY"
		}
		fmt.Fprintf(tw, "gateway\t%s · %s · endpoints %s routable\n", ready, plural(len(g.Services), "service"), countText(s.Endpoints))
	}
	if s.Models != nil {
		fmt.Fprintf(tw, "models\t%s versions ready\n", countText(s.Models))
	}
	if s.Views != nil {
		fmt.Fprintf(tw, "features\t%s online views fresh\n", countText(s.Views))
	}
	if s.RecentErrors != nil {
		line := plural(int(*s.RecentErrors), "failed request") + " seen"
		if e := s.LastError; e != nil {
			line += fmt.Sprintf(" (latest %s ago: %d %s on %s)", ago(s.Time, e.Time), e.Status, clean(e.Reason), clean(e.Service))
		}
		fmt.Fprintf(tw, "errors\t%s\n", line)
	}
	if !rep.Console {
		fmt.Fprintf(tw, "console\tnot served on this admin port: models, feature views and errors unknown\n")
	}
	_ = tw.Flush()
}

// viewText is a feature view's state, freshness and hot-cache columns.
func viewText(v console.View, now time.Time) (state, fresh, hot string) {
	state = "fresh"
	switch {
	case !v.Online:
		state = "offline"
	case v.Error != "":
		state = "ERROR"
	case v.Stale:
		state = "STALE"
	}
	if v.Online {
		fresh = "never materialized"
		if v.Materialized {
			fresh = "materialized " + ago(now, v.LastSuccess) + " ago"
		}
		if v.TTLSeconds > 0 {
			fresh += ", ttl " + humanDuration(time.Duration(v.TTLSeconds*float64(time.Second)))
		}
	}
	if h := v.Hot; h != nil {
		hot = fmt.Sprintf("hot: %d keys", h.Keys)
		if share := h.HitShare(); share >= 0 {
			hot += fmt.Sprintf(", %.0f%% of hot reads hit", share*100)
		}
		if h.Stale {
			hot += ", STALE"
		}
	}
	return state, fresh, hot
}

// serviceText is a service's routes and its release state.
func serviceText(svc console.Service) (routes, extra []string) {
	for _, r := range svc.Routes {
		var ts []string
		for _, t := range r.Targets {
			v := t.Version
			if v == "" {
				v = svc.ModelVersion
			}
			ts = append(ts, fmt.Sprintf("v%s %d%%", clean(v), t.Weight))
		}
		routes = append(routes, clean(r.Name)+"→"+strings.Join(ts, " "))
	}
	extra = []string{"rollout none"}
	if r := svc.Rollout; r != nil {
		extra[0] = fmt.Sprintf("rollout %s stage %d/%d (%g%% to v%s)", clean(r.State), r.Stage, r.Stages, r.Traffic, clean(r.Candidate))
	}
	if sh := svc.Shadow; sh != nil {
		extra = append(extra, fmt.Sprintf("shadow v%s %g%%", clean(sh.Version), sh.Percent))
	}
	if b := svc.Breaker; b != nil {
		extra = append(extra, "breaker "+map[bool]string{true: "OPEN", false: "closed"}[b.Open])
	}
	if fb := svc.Fallback; fb != nil {
		extra = append(extra, "fallback "+map[bool]string{true: "ON", false: "off"}[fb.Triggered])
	}
	return routes, extra
}

func countText(c *console.Count) string {
	if c == nil {
		return "?"
	}
	return strconv.Itoa(c.OK) + "/" + strconv.Itoa(c.Total)
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return humanDuration(now.Sub(t))
}

// humanDuration writes d the way an operator reads it: 12s, 4m10s, 5m,
// 2h05m, 6h, 3d4h, 7d.
func humanDuration(d time.Duration) string {
	d = d.Abs()
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		if sec := d % time.Minute / time.Second; sec > 0 {
			return fmt.Sprintf("%dm%02ds", d/time.Minute, sec)
		}
		return fmt.Sprintf("%dm", d/time.Minute)
	case d < 24*time.Hour:
		if m := d % time.Hour / time.Minute; m > 0 {
			return fmt.Sprintf("%dh%02dm", d/time.Hour, m)
		}
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	if h := d % (24 * time.Hour) / time.Hour; h > 0 {
		return fmt.Sprintf("%dd%dh", d/(24*time.Hour), h)
	}
	return fmt.Sprintf("%dd", d/(24*time.Hour))
}

// plural writes n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// clean drops control characters from text read off the network, so a
// model name or an error message cannot drive the terminal.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
