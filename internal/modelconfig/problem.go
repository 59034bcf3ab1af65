package modelconfig

import (
	"strconv"
	"strings"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// ReasonInvalidConfig is the apierr.Error reason of every configuration
// error this package returns.
const ReasonInvalidConfig = "invalid_model_config"

// Position locates a field in a config file. Line and Col are 1-based; 0
// means unknown. Col counts characters (runes), as protobuf's own text
// parser does.
type Position struct {
	File      string
	Line, Col int
}

// String formats p as "file:line:col", or "file" when the line is unknown.
func (p Position) String() string {
	if p.Line <= 0 {
		return p.File
	}
	s := strconv.Itoa(p.Line)
	if p.Col > 0 {
		s += ":" + strconv.Itoa(p.Col)
	}
	if p.File == "" {
		return s
	}
	return p.File + ":" + s
}

// Error is one problem in a model configuration (or a model repository),
// with where it was found.
type Error struct {
	Pos Position
	Msg string
}

// Error formats the problem as "file:line:col: msg".
func (p Error) Error() string {
	if pos := p.Pos.String(); pos != "" {
		return pos + ": " + p.Msg
	}
	return p.Msg
}

// Errors is every problem found in one configuration, in the order found.
// It is itself an error, so callers can recover the list with errors.As
// from the error Err returns.
type Errors []Error

// Error lists the problems, one a line.
func (ps Errors) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// Err returns nil when ps is empty, else an *apierr.Error of kind
// KindInvalid and reason ReasonInvalidConfig that wraps ps and lists every
// problem, one a line.
func (ps Errors) Err() error {
	if len(ps) == 0 {
		return nil
	}
	return &apierr.Error{
		Kind:   apierr.KindInvalid,
		Reason: ReasonInvalidConfig,
		Msg:    "invalid model configuration",
		Err:    ps,
	}
}
