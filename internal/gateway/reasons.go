package gateway

// Reason codes of this package's errors; each is a row of the table in
// package apierr (apierr.Codes).
const (
	// ReasonInvalidConfig: a gateway configuration reload whose file does not load.
	ReasonInvalidConfig = "invalid_config"
	// ReasonReloadUnavailable: a configuration reload asked of a gateway not started from a file.
	ReasonReloadUnavailable = "reload_unavailable"
)
