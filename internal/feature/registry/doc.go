// Package registry loads a feature repository: feature_store.yaml and the
// YAML definitions of entities, sources (request sources included),
// feature views, on-demand feature views and feature services next to
// it; on-demand views' expressions are type-checked and compiled here,
// once per loaded Repo. Load validates everything at once and returns
// every problem, each naming file:line and the object, as Errors.
//
// A loaded Repo is immutable: serving plans compiled from it can be
// shared by any number of goroutines. Holder keeps the current Repo in an
// atomic pointer and swaps in a new one only after it loaded and
// validated, so requests never wait on a registry refresh (Feast's sync
// cache mode blocks them).
//
// The registry file (feature_store.yaml's registry, data/registry.json by
// default) is a JSON Snapshot of the last applied Repo; plan diffs the
// definitions against it and apply rewrites it atomically.
package registry
