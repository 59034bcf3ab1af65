// Package cli holds Sluice's commands. It turns flags into component
// options and wires the components together; nothing else lives here.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// Version is the Sluice version, set at build time with
// -ldflags "-X github.com/sluice-ml/sluice/internal/cli.Version=...".
var Version = defaultVersion

// exitError carries a process exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Run executes the command line args and returns the process exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	if ue, ok := errors.AsType[*usageError](err); ok {
		fmt.Fprintf(stderr, "sluice: %v\n\n%s", ue.err, ue.cmd.UsageString())
		return 1
	}
	if ee, ok := errors.AsType[*exitError](err); ok {
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintln(stderr, "sluice:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "sluice:", err)
	return 1
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "sluice",
		Short: "Sluice serves ML models (Triton-compatible), features and the gateway between them",
		Long: `Sluice is an online ML inference platform in one binary.

  sluice serve -c sluice.yaml           run the whole chain: model server, feature server,
                                        gateway, admin API and console
  sluice serve --model-repository DIR   serve a Triton-layout model repository
                                        (KServe v2 HTTP :8000, gRPC :8001, metrics :8002)
  sluice feature-server --repo DIR      serve online features (Feast HTTP API, :6566)
  sluice repo check DIR                 validate a model repository offline
  sluice status | rollout | shadow      operate a running deployment
  sluice accuracy import|status|report  online accuracy from outcomes`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(
		newServeCmd("serve", "Run Sluice: the model server from --model-repository, or with -c sluice.yaml the whole chain (model server, feature server, gateway)"),
		newServeCmd("model-server", "Run the model server alone"),
		newRepoCmd(),
		newFeaturesCmd(),
		newFeatureServerCmd(),
		newPerfCmd(),
		newConfigCmd(),
		newRolloutCmd(),
		newShadowCmd(),
		newAccuracyCmd(),
		newStatusCmd(),
		newVersionCmd(),
	)
	// "sluice --version" prints what "sluice version" does.
	root.Version = Version
	cobra.AddTemplateFunc("sluiceBuildInfo", func() string {
		var b strings.Builder
		readBuildInfo("").write(&b)
		return b.String()
	})
	root.SetVersionTemplate("{{sluiceBuildInfo}}")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return &usageError{cmd: c, err: err} })
	finish(root)
	return root
}

// usageError is a wrong command line: Run prints it with the command's
// usage (SilenceUsage keeps cobra from printing usage for every error).
type usageError struct {
	cmd *cobra.Command
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// enumFlags are the flags with a fixed set of values: shell completion
// offers them on every command that has the flag.
var enumFlags = map[string][]string{
	"log-format":         {"json", "text"},
	"log-level":          {"debug", "info", "warn", "error"},
	"model-control-mode": {"none", "poll", "explicit"},
	"protocol":           {"http", "grpc"},
	"measurement-mode":   {"time_windows", "count_windows"},
	"read-auth":          {"open", "token"},
	"tls-client-auth":    {"require", "request"},
}

// finish walks the command tree: argument-count errors carry the command's
// usage, and enum flags complete to their values.
func finish(c *cobra.Command) {
	if args := c.Args; args != nil {
		c.Args = func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil {
				return &usageError{cmd: cmd, err: err}
			}
			return nil
		}
	}
	for name, vals := range enumFlags {
		if c.LocalFlags().Lookup(name) != nil {
			_ = c.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(vals, cobra.ShellCompDirectiveNoFileComp)) // fails only for a flag registered twice
		}
	}
	for _, sub := range c.Commands() {
		finish(sub)
	}
}
