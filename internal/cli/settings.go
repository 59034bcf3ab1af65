package cli

import (
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluice-ml/sluice/internal/telemetry"
)

// The servers' settings structs are the config package's (what sluice.yaml
// holds) and the components' own options; their flags are bound to the
// fields, with the values the fields hold when bound as their defaults
// (config.NewModelServer, config.NewFeatureServer), so that each default
// is written once.

// secondsValue is a whole number of seconds on the command line bound to
// a duration: --repository-poll-secs sets model_server's
// repository_poll_interval.
type secondsValue struct{ d *time.Duration }

func (v secondsValue) String() string { return strconv.FormatInt(int64(*v.d/time.Second), 10) }

func (v secondsValue) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return err
	}
	*v.d = time.Duration(n) * time.Second
	return nil
}

func (secondsValue) Type() string { return "int" }

// secondsVar binds the flag name, in whole seconds, to d; its default is
// what d holds.
func secondsVar(fl *pflag.FlagSet, d *time.Duration, name, usage string) {
	fl.Var(secondsValue{d}, name, usage)
}

// registerLogFlags binds --log-format and --log-level to o, with the
// servers' defaults.
func registerLogFlags(fl *pflag.FlagSet, o *telemetry.LogOptions) {
	fl.StringVar(&o.Format, "log-format", telemetry.DefaultLogFormat, "log format: json or text")
	fl.StringVar(&o.Level, "log-level", telemetry.DefaultLogLevel, "log level: debug, info, warn or error")
}
