package rollout

// Reason codes of this package's errors; each is a row of the table in
// package apierr (apierr.Codes).
const (
	// ReasonRolloutBusy: another operator command on the rollout is still being saved.
	ReasonRolloutBusy = "rollout_busy"
	// ReasonRolloutChanged: another replica changed the rollout while this command ran.
	ReasonRolloutChanged = "rollout_changed"
	// ReasonRolloutComplete: an operator command on a rollout that is complete.
	ReasonRolloutComplete = "rollout_complete"
	// ReasonRolloutFleetUnavailable: the fleet's shared rollout state cannot be read or written.
	ReasonRolloutFleetUnavailable = "rollout_fleet_unavailable"
	// ReasonRolloutRolledBack: an operator command on a rollout that is rolled back.
	ReasonRolloutRolledBack = "rollout_rolled_back"
	// ReasonRolloutStateNotSaved: the rollout's new state could not be saved.
	ReasonRolloutStateNotSaved = "rollout_state_not_saved"
)
