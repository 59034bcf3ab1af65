// Package rollout is the staged rollout controller of an inference
// service: it moves a candidate model version through ordered
// stages of traffic groups chosen by business value, promotes when the
// gates hold, and rolls back automatically, with a reason and a diagnosis,
// when one fails. It is a library: the gateway asks Decide which version
// serves each request, reports outcomes with Observe, runs Run (or calls
// Tick), and exposes Status and the manual commands on its admin API.
//
// # Stages and groups
//
// A Config lists stages in order. Each stage adds traffic groups, and a
// group is a set of requests defined by header matches (exact, prefix,
// regex, present: the gateway routes' rules, see match.HeaderMatch) and request
// field matches (field → accepted values), all of which must hold. A
// request belongs to the first group, in stage order, that it matches; the
// final stage's group, "all", takes the rest (a final stage "all" is
// appended when the last configured stage has groups). Group membership
// therefore never changes during a rollout, which keeps each group's
// windows and its metrics series comparable across stages.
//
// While stage k is current, the candidate serves every request of the
// groups of stages before k and TrafficPercent of the requests of stage
// k's groups; the stable version serves the rest. The share is picked by
// the stable routing hash (the gateway's route.Hash: FNV-1a + fmix64) of
// the request's HashKey value, or of its request id, so one key gets the
// same version on every replica and after restarts. After the last stage
// the rollout is complete: the candidate serves everyone but a control
// share (ControlPercent, default 5 %, chosen by other bits of the same
// hash) that keeps going to the stable version, so that the two can still
// be compared. After a rollback the stable version serves every request.
//
// # Gates
//
// Outcomes are kept per group and arm in windows that restart with every
// stage, so gates judge only what the current stage saw. A group's gates
// are judged once its candidate traffic in the stage reaches MinRequests
// (default 500); before that they are pending. The gates are, for the
// candidate's requests in one group:
//
//   - error_rate: the share with status >= 500 must not exceed
//     max_error_rate (0.01);
//   - p95_latency_ratio: the candidate's p95 latency over the stable
//     version's must not exceed max_p95_latency_ratio (1.1). The stable
//     baseline is the stable version's outcomes in the current stage, or
//     since the rollout started when the stage has fewer than MinRequests
//     of them (a stage that sends everyone to the candidate);
//   - low_confidence_share: the share of answers whose confidence is below
//     confidence_below (0.6) must not exceed max_low_confidence_share
//     (0.15); off when fewer than MinRequests answers carry a score;
//   - drift_psi and drift_p_value: when configured and a DriftFunc is
//     attached, the largest PSI it reports for the group must not exceed
//     max_drift_psi and the smallest KS p-value must not fall below
//     min_drift_p_value. With no report the gates are pending.
//
// Latencies are kept in a fixed log-scale histogram (1 % resolution), so a
// window's memory is bounded whatever the traffic.
//
// Tick rolls back at once when any gate fails in any group the candidate
// serves (earlier stages' groups included), while progressing or paused.
// The Reason names the gate, the measured value and threshold, the stage and
// the group, lists every failure, and carries the first MaxSuspects
// features a DiagnoseFunc returns for the failing group: the features whose
// live distribution there differs most from the stable groups, so "why did
// the long tail fail?" has a first answer. A progressing rollout is promoted
// when the stage has lasted MinDuration and every gate of every one of the
// stage's groups is judged and holds; a group that gets no traffic holds
// the rollout at its stage until an operator promotes it. Gates are not
// judged after completion. Judging a gate repeatedly as data arrives has
// the usual multiple-testing cost: MinRequests should be large enough that
// a healthy candidate's noise stays under the thresholds.
//
// # Manual commands
//
// Pause stops automatic promotion (gates still roll back), Resume restarts
// it, Promote moves to the next stage whatever the gates say, Rollback
// rolls back with the operator's reason, and Reset starts over from the
// first stage, the only way out of a rollback. Commands that make no sense
// in the current state return an *apierr.Error of kind KindConflict. Each
// takes a context: it bounds the wait for a transition in progress (an
// error of kind unavailable, reason rollout_busy, when it ends first) and
// the write of the new state.
//
// # State machine and driver
//
// A transition (a Tick's or a command's) reads the state under the
// controller's lock and computes the next one there, a pure step; it
// writes the new state outside the lock, bounded by the caller's context
// and FleetTimeout; then it commits it under the lock, or takes the state
// another replica wrote first. Transitions run one at a time. So Status,
// Decide, Observe and ApplyFleet never wait for the network or the disk: a
// hung fleet store delays only the transition that writes to it.
//
// # State
//
// Every transition is written to StateFile atomically (a temporary file in
// the same folder, fsync, rename, fsync of the folder): schema version,
// versions, state, stage, since, the rollback reason and the last
// MaxHistory transitions, as JSON. New resumes a saved state for the same
// stable and candidate versions (a rolled-back rollout stays rolled back);
// a state for other versions is a finished rollout and a new one starts. A
// state file that cannot be parsed stops New, because starting over could
// send traffic to a candidate that was rolled back. Windows are not saved:
// after a restart a stage needs MinRequests again, while its MinDuration
// still counts from when it began.
//
// # Fleet
//
// With Options.Fleet (the cluster section: a JetStream KV bucket) the
// state lives in the fleet's store instead of StateFile. Every transition
// is a compare-and-set on the state's revision: of the replicas deciding
// the same transition exactly one succeeds and the others take its state
// (an operator's command that loses answers a conflict). ApplyFleet applies
// the changes other replicas make, as the caller's watcher delivers them.
// Each replica publishes its windows (WindowsSnapshot, tagged with the
// stage and its start) and the gates judge its own windows plus the other
// replicas' fresh ones. While the store cannot be reached, a failing gate
// still rolls back here (serving the stable version is always safe) and
// the rollback is saved at the first Tick that reaches the store; other
// transitions are refused.
//
// # Metrics
//
// sluice_rollout_stage{service} (the stage index, from 0),
// sluice_rollout_state{service,state} (1 for the current state),
// sluice_rollout_transitions_total{service,kind} and
// sluice_rollout_requests_total{service,arm,group}. Controllers of several
// services may share one registry.
package rollout
