// Package duration provides the duration type of sluice.yaml: a
// time.Duration written as a Go duration string.
//
// It is a leaf apart from config because config embeds the rollout
// controller's Config, so the rollout package, which needs the same type,
// cannot import config; config.Duration is an alias of [Duration].
package duration

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written in YAML as a Go duration string
// ("250ms", "90s", "1h").
type Duration time.Duration

// UnmarshalYAML parses a Go duration string. An error is a *yaml.TypeError
// whose message starts with "line N:", like the decoder's own, so that it
// can be placed in the file.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %q is not a duration (want e.g. 250ms, 90s, 1h)", n.Line, s)}}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a Go duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }
