package servingapi

import (
	"log/slog"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// The edges' own errors carry serving's reason codes (serving.ReasonX):
// a request the wire format cannot express is refused as the Go API
// refuses a bad Request.

func invalidf(reason, format string, args ...any) *apierr.Error {
	return apierr.Errorf(apierr.KindInvalid, reason, format, args...)
}

// edgeLogger is the edges' logger: their log lines keep the component
// the feature server's lines have always had, so that one query finds a
// request's read and its answer.
func edgeLogger(logger *slog.Logger) *slog.Logger {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return logger.With("component", "feature_serving")
}
