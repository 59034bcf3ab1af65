// Package modelrepo serves the models of one or more Triton-layout model
// repositories: it scans <repo>/<model>/config.pbtxt and the numeric version
// folders, applies the version policy, loads, verifies and warms up each
// version, swaps it in atomically beside whatever serves now, drains and
// unloads retired versions, and validates and runs inference requests on a
// pool of model instances.
//
// # Zero-downtime swaps
//
// What a model serves is an immutable set of loaded versions behind an
// atomic pointer. A new or changed version loads in the background, is
// verified (SHA256SUMS manifest, provenance and expected git commit, the
// backend's I/O signature against the config, a warm-up inference) and only
// then published. Requests take a reference on the version they run on; a
// retired version refuses new references, finishes those it has, and then
// closes its instances. A load that fails leaves the versions that served
// before serving, and says why in the index, the log and the metrics.
//
// # Scheduling
//
// Every loaded version has a batch.Batcher over all its instances, built
// from dynamic_batching (or, without it, one that runs each request
// alone). Requests reach it after validation, with the priority and timeout
// request parameters. The batcher reports each executed batch to the
// version's statistics (execution_count, batch_stats); each request adds
// its batch size, queue and compute times. A retired version's batcher is
// closed only once its last request has finished, then its instances.
//
// # Ensembles
//
// A model with platform "ensemble" runs no model file: its versions hold a
// step graph checked at load (structure always, tensor types against the
// step models loaded then). Whether it can serve is decided per request,
// from the step models' serving versions, and cached until they change;
// the index shows the reason when it cannot. Each step runs through the
// step model's own Infer path as soon as its input tensors exist.
//
// # Response cache
//
// With Options.CacheSizeBytes, models with response_cache enabled look up
// a sha256 of their validated request before scheduling it; the cache is
// shared and evicts by bytes, least recently used first. Keys include the
// load a response came from, and a version's entries are dropped when it
// is unloaded or replaced, so no load answers with another's results.
//
// # Control modes
//
// ControlNone loads every model at start; ControlPoll also rescans the
// repositories every PollInterval; ControlExplicit loads only the start-up
// models and then follows the Load and Unload API. Polling compares a
// content fingerprint (the sha256 of every file), not modification times,
// and loads a change only once the fingerprint is the same in two
// consecutive polls, so half-copied versions are not loaded. Hashing reads
// every file of every model at each poll: poll mode suits repositories of
// modest size (Triton, too, calls it a development mode).
//
// # Index reasons
//
// A version that failed to load is UNAVAILABLE with the reason. When the
// failed load was a reload of a version that serves, the entry stays READY
// and its reason says the reload failed and the previous load keeps
// serving. A failure that concerns no version (a model whose config cannot
// be read and that serves nothing) is an entry with an empty version.
//
// # Unreadable repositories
//
// When a repository cannot be read during a poll, it gives no information:
// its models keep serving what they serve, each of their index entries
// carries the reason "repository <path> unreadable: <error>" (the state
// stays READY), sluice_model_repository_up{repository} drops to 0 and
// sluice_model_repository_errors_total counts the failed polls. The reason
// clears when a poll reads the repository again.
//
// # Provenance
//
// A version folder may hold model_config.json with "version" (a label such
// as "2.1.0-a1b2c3d") and "git_commit". When a commit is expected, from
// Options.ExpectedCommits or from the repository pin file
// <repo>/<model>/expected_git_commit (the option wins), a version with
// another commit is refused with reason model_git_mismatch.
package modelrepo
