package materialize

// Reason codes of this package's errors; each is a row of the table in
// package apierr (apierr.Codes).
const (
	// ReasonInvalidWindow: a materialization whose end is before its start.
	ReasonInvalidWindow = "invalid_window"
	// ReasonUnknownFeatureView: a feature view that is not defined.
	ReasonUnknownFeatureView = "unknown_feature_view"
)
