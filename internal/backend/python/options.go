package python

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// DefaultInterpreter is the Python that runs workers unless the backend
// setting "interpreter" names another: the system's, where Debian's
// python3-numpy and python3-torch are installed.
const DefaultInterpreter = "/usr/bin/python3"

// Options configure the Python backend. Zero fields take the defaults.
type Options struct {
	// Interpreter is the Python 3 executable workers run with.
	Interpreter string
	// StartTimeout bounds a worker's start: the interpreter, importing the
	// model and initialize(). Default 2m (importing torch alone takes
	// seconds on a busy machine).
	StartTimeout time.Duration
	// PingInterval is how often an idle worker is pinged; a ping that goes
	// unanswered for PingTimeout while the worker has nothing else to do
	// gets the worker killed and restarted. Defaults 5s and 10s.
	PingInterval, PingTimeout time.Duration
	// FinalizeTimeout is how long an unloading worker may spend in
	// finalize() before it gets SIGTERM, and KillTimeout how long it then
	// has before SIGKILL. Defaults 10s and 3s.
	FinalizeTimeout, KillTimeout time.Duration
	// RestartBackoff is the delay before restarting a worker after its
	// first quick death; it doubles with every further quick death in a
	// row, up to MaxRestartBackoff. Defaults 100ms and 10s.
	RestartBackoff, MaxRestartBackoff time.Duration
	// QuickDeath: a worker that dies less than this long after it became
	// ready (or fails to start) dies quickly. After RestartLimit quick
	// deaths in a row the instance stays down until the model is loaded
	// again. Defaults 1m and 5.
	QuickDeath   time.Duration
	RestartLimit int
	// MaxMessageBytes bounds one message between Sluice and a worker.
	// Default 1 GiB.
	MaxMessageBytes int
	// TorchLibraryDirs go first on the LD_LIBRARY_PATH of the workers
	// that run PyTorch models: the folder of the BLAS the in-process
	// engine bundles, so that a model gives the same answers on either
	// engine (libtorch's BLAS decides the last bits of its results).
	TorchLibraryDirs []string
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if o.Interpreter == "" {
		o.Interpreter = DefaultInterpreter
	}
	def(&o.StartTimeout, 2*time.Minute)
	def(&o.PingInterval, 5*time.Second)
	def(&o.PingTimeout, 10*time.Second)
	def(&o.FinalizeTimeout, 10*time.Second)
	def(&o.KillTimeout, 3*time.Second)
	def(&o.RestartBackoff, 100*time.Millisecond)
	def(&o.MaxRestartBackoff, 10*time.Second)
	def(&o.QuickDeath, time.Minute)
	if o.RestartLimit <= 0 {
		o.RestartLimit = 5
	}
	if o.MaxMessageBytes <= 0 || o.MaxMessageBytes > maxMessageLimit {
		o.MaxMessageBytes = 1 << 30
	}
	return o
}

// maxMessageLimit is the largest message the framing's u32 size holds.
const maxMessageLimit = 1<<32 - 1

// The backend settings ParseSettings reads (--backend-config
// python,<setting>=<value>, or backend_config.python in sluice.yaml).
// Durations are Go durations ("500ms", "2m").
const (
	SettingInterpreter     = "interpreter"
	SettingStartTimeout    = "start-timeout"
	SettingPingInterval    = "ping-interval"
	SettingPingTimeout     = "ping-timeout"
	SettingFinalizeTimeout = "finalize-timeout"
	SettingKillTimeout     = "kill-timeout"
	SettingRestartBackoff  = "restart-backoff"
	SettingMaxBackoff      = "max-restart-backoff"
	SettingQuickDeath      = "quick-death"
	SettingRestartLimit    = "restart-limit"
	SettingMaxMessageBytes = "max-message-bytes"
)

// Triton's python backend settings, accepted so that a Triton command line
// (--backend-config python,shm-default-byte-size=…) starts Sluice too.
// stub-timeout-seconds bounds a worker's start, as start-timeout does
// (start-timeout wins when both are given). The shm-* settings size and
// name the shared-memory transport between Triton and its stubs; Sluice's
// workers exchange framed messages over a Unix socket (bounded by
// max-message-bytes), so they are checked and change nothing.
const (
	SettingTritonStubTimeout = "stub-timeout-seconds"
	SettingTritonShmDefault  = "shm-default-byte-size"
	SettingTritonShmGrowth   = "shm-growth-byte-size"
	SettingTritonShmPrefix   = "shm-region-prefix-name"
)

// ParseSettings reads the python backend's settings. Unknown settings are
// errors, so that a misspelt one does not pass silently.
func ParseSettings(settings map[string]string) (Options, error) {
	var o Options
	durations := map[string]*time.Duration{
		SettingStartTimeout:    &o.StartTimeout,
		SettingPingInterval:    &o.PingInterval,
		SettingPingTimeout:     &o.PingTimeout,
		SettingFinalizeTimeout: &o.FinalizeTimeout,
		SettingKillTimeout:     &o.KillTimeout,
		SettingRestartBackoff:  &o.RestartBackoff,
		SettingMaxBackoff:      &o.MaxRestartBackoff,
		SettingQuickDeath:      &o.QuickDeath,
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var stubTimeout time.Duration
	for _, k := range keys {
		v := strings.TrimSpace(settings[k])
		if d, ok := durations[k]; ok {
			dur, err := time.ParseDuration(v)
			if err != nil || dur <= 0 {
				return Options{}, fmt.Errorf("python backend setting %s: %q is not a positive duration such as 500ms or 2m", k, v)
			}
			*d = dur
			continue
		}
		switch k {
		case SettingInterpreter:
			if v == "" {
				return Options{}, fmt.Errorf("python backend setting %s is empty", k)
			}
			o.Interpreter = v
		case SettingRestartLimit, SettingMaxMessageBytes:
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || (k == SettingMaxMessageBytes && int64(n) > maxMessageLimit) {
				return Options{}, fmt.Errorf("python backend setting %s: %q is not a positive integer in range", k, v)
			}
			if k == SettingRestartLimit {
				o.RestartLimit = n
			} else {
				o.MaxMessageBytes = n
			}
		case SettingTritonStubTimeout:
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return Options{}, fmt.Errorf("python backend setting %s: %q is not a positive number of seconds", k, v)
			}
			stubTimeout = time.Duration(n) * time.Second
		case SettingTritonShmDefault, SettingTritonShmGrowth:
			if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
				return Options{}, fmt.Errorf("python backend setting %s: %q is not a byte count", k, v)
			}
		case SettingTritonShmPrefix:
			if v == "" {
				return Options{}, fmt.Errorf("python backend setting %s is empty", k)
			}
		default:
			return Options{}, fmt.Errorf("unknown python backend setting %q (known: %s)", k, strings.Join(knownSettings(), ", "))
		}
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = stubTimeout
	}
	return o, nil
}

func knownSettings() []string {
	out := []string{
		SettingInterpreter, SettingStartTimeout, SettingPingInterval, SettingPingTimeout,
		SettingFinalizeTimeout, SettingKillTimeout, SettingRestartBackoff, SettingMaxBackoff,
		SettingQuickDeath, SettingRestartLimit, SettingMaxMessageBytes,
		SettingTritonStubTimeout, SettingTritonShmDefault, SettingTritonShmGrowth, SettingTritonShmPrefix,
	}
	sort.Strings(out)
	return out
}
