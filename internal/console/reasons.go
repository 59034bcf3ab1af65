package console

// Reason codes of this package's errors; each is a row of the table in
// package apierr (apierr.Codes).
const (
	// ReasonNotRunning: a console page for a component this process does not run.
	ReasonNotRunning = "not_running"
	// ReasonSourceUnavailable: the component a console page reads from does not answer.
	ReasonSourceUnavailable = "source_unavailable"
)
