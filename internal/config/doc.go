// Package config loads sluice.yaml, the one file that configures
// "sluice serve": the model server, the feature server and the inference
// gateway between them.
//
// Loading follows four steps, each reporting positions as file:line:col:
//
//  1. The YAML is parsed into a node tree and every scalar value has
//     ${NAME} and ${NAME:-default} expanded from the environment ("$${"
//     writes a literal "${"). An unset variable without a default is an
//     error naming it. Keys are never expanded.
//  2. Keys are checked against the schema: an unknown key is an error with
//     its field path and, for a likely typo, a suggestion. The same walk
//     records where every field path was written.
//  3. The tree is decoded into Config and defaults fill what was left out.
//     A client's plain api_key is accepted only when it came from ${ENV}
//     (secrets must not sit in config); it is hashed into api_key_sha256
//     and dropped, so a loaded Config never holds it.
//  4. Validate checks the result and reports every problem at once.
//
// Field names follow Envoy and Istio where they have one (retry_on,
// per_try_timeout, outlier_detection, base_ejection_time,
// max_ejection_percent, load_balancing: least_request). Where the gateway
// issue differs from Envoy the config says so: outlier ejection lasts a
// fixed base_ejection_time, consecutive_503 counts 503s within a sliding
// minute, and log sampling picks requests by hash of the request id.
//
// Validate, and so "sluice config check", does static checks only: the
// schema, names and references inside the file (routes to backends,
// input fields to request fields), weights, ranges, durations, regular
// expressions and fallback rule syntax. Whether the input tensors match the
// model's real inputs and the feature service's real features is checked
// once the gateway wires config, model repository and feature registry
// together.
//
// Config is data: it imports only leaf packages (ones that import nothing
// internal but other leaves, and hold plain types and pure functions).
// Where sluice.yaml holds a component's settings, the component owns the
// type and its checks in a leaf package of its own (tlsconfig/tlsspec,
// admission/limitspec, authz/authzspec, release/rollout/rolloutspec,
// match) and config embeds it; only cli wires components
// together. internal/archtest enforces this.
package config
