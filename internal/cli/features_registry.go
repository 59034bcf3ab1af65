package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluice-ml/sluice/internal/feature/registry"
)

// loadFeatureRepo loads the repository in dir, printing every definition
// problem to out; it returns an exit error when there are any.
func loadFeatureRepo(cmd *cobra.Command, dir string, out io.Writer) (*registry.Repo, error) {
	r, err := registry.Load(cmd.Context(), dir)
	if errs, ok := errors.AsType[registry.Errors](err); ok {
		for _, e := range errs {
			fmt.Fprintln(out, e.Error())
		}
		return nil, &exitError{code: 1, err: fmt.Errorf("%d definition error(s) in %s", len(errs), dir)}
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

func newFeaturesPlanCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Validate the feature definitions and show how they differ from the registry",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			r, err := loadFeatureRepo(cmd, dir, out)
			if err != nil {
				return err
			}
			old, err := registry.ReadSnapshot(r.Path(r.Config.Registry))
			if err != nil {
				return err
			}
			snap := r.Snapshot()
			changes := registry.Diff(old, snap)
			if err := registry.WritePlan(out, changes); err != nil {
				return err
			}
			writeServing(out, r.Config.Registry, old, snap, changes)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "repo", ".", "feature repository folder (holding feature_store.yaml)")
	return cmd
}

func newFeaturesApplyCmd() *cobra.Command {
	var (
		dir         string
		allowRetype bool
	)
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Validate the feature definitions and write them to the registry",
		Long: `Validate the feature definitions, show how they differ from the registry
(what each schema change does to the values already in the online store)
and write the registry.

A feature whose type changes reads NOT_FOUND from every row stored before
the change until its view is materialized again: apply refuses such a change
unless --allow-type-change is given.

The feature server serves the registry apply writes, never the files
behind its back: edits that are not applied (or that apply refused) are
reported by the server and by plan, and not served.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			r, err := loadFeatureRepo(cmd, dir, out)
			if err != nil {
				return err
			}
			path := r.Path(r.Config.Registry)
			old, err := registry.ReadSnapshot(path)
			if err != nil {
				return err
			}
			snap := r.Snapshot()
			if err := registry.WritePlan(out, registry.Diff(old, snap)); err != nil {
				return err
			}
			if retyped := registry.TypeChanges(old, snap); len(retyped) > 0 && !allowRetype {
				return &exitError{code: 1, err: fmt.Errorf(
					"apply refused: changing the type of %s makes the stored values read NOT_FOUND until the view is re-materialized; run apply with --allow-type-change to go ahead (registry not written)",
					strings.Join(retyped, ", "))}
			}
			if err := registry.WriteSnapshot(path, snap); err != nil {
				return err
			}
			odViews := ""
			if len(r.OnDemandViews) > 0 {
				odViews = ", " + plural(len(r.OnDemandViews), "on-demand feature view")
			}
			fmt.Fprintf(out, "Applied: registry %s (%s, %s, %s%s, %s).\n", r.Config.Registry,
				nouns(len(r.Entities), "entity", "entities"), plural(len(r.Sources)+len(r.RequestSources), "source"),
				plural(len(r.Views), "feature view"), odViews, plural(len(r.Services), "feature service"))
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "repo", ".", "feature repository folder (holding feature_store.yaml)")
	cmd.Flags().BoolVar(&allowRetype, "allow-type-change", false, "apply even when a feature's type changes (its stored values read NOT_FOUND until the view is re-materialized)")
	return cmd
}

// writeServing says what the feature server does with the changes: it
// serves the applied registry, so they serve only once applied, and a
// type change only with --allow-type-change.
func writeServing(out io.Writer, regPath string, old, snap *registry.Snapshot, changes []registry.Change) {
	if len(changes) == 0 {
		return
	}
	if retyped := registry.TypeChanges(old, snap); len(retyped) > 0 {
		fmt.Fprintf(out, "Refused: apply refuses the type change of %s unless run with --allow-type-change; the feature server keeps serving the applied types (reloads count result=\"refused\").\n",
			strings.Join(retyped, ", "))
	}
	if old == nil {
		fmt.Fprintln(out, "Not applied: the feature server serves these files until apply writes the registry (a type change is refused at reload all the same).")
		return
	}
	fmt.Fprintf(out, "Not served: the feature server serves the applied registry (%s), not these files, until apply writes them (sluice_feature_registry_unserved_changes says how many objects differ).\n", regPath)
}

// nouns writes n and the noun's form for n: one when n is 1, else many.
func nouns(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
