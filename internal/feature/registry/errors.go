package registry

import (
	"fmt"
	"strings"

	"github.com/sluice-ml/sluice/internal/feature"
)

// Error is one definition problem: where it is, which object it concerns
// ("feature view 'user_stats'") and what is wrong.
type Error struct {
	Pos    feature.Position
	Object string
	Msg    string
}

// Error formats e as "file:line: object: msg" (parts that are unknown are
// left out).
func (e Error) Error() string {
	var b strings.Builder
	if e.Pos.File != "" {
		b.WriteString(e.Pos.File)
		if e.Pos.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Pos.Line)
		}
		b.WriteString(": ")
	}
	if e.Object != "" {
		b.WriteString(e.Object)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in a feature repository, in file and line
// order.
type Errors []Error

// Error returns the problems one per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}
