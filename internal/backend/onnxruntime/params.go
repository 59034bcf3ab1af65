package onnxruntime

import (
	"fmt"
	"strconv"
	"strings"
)

// Parameter names read from config.pbtxt's parameters map.
const (
	ParamIntraOpThreads = "intra_op_thread_count"
	ParamInterOpThreads = "inter_op_thread_count"
	ParamGraphOptLevel  = "graph_optimization_level"
)

// graphLevel is an ONNX Runtime graph optimization level, independent of cgo.
type graphLevel uint8

const (
	levelDefault graphLevel = iota // leave ONNX Runtime's default (all)
	levelDisableAll
	levelBasic
	levelExtended
	levelAll
)

// sessionConfig is what Load derives from the parameters map.
type sessionConfig struct {
	intraThreads int // 0 lets ONNX Runtime pick one thread per core
	interThreads int
	// Spinning pool threads burn a core each while waiting for work; when
	// the sessions' threads outnumber the cores they starve each other, so
	// spinning is turned off.
	intraSpin bool
	interSpin bool
	level     graphLevel
}

// parseSessionConfig reads the backend's parameters. instances is the
// number of sessions the server runs for the model, cpus the usable cores.
// Unknown parameters are ignored: config.pbtxt may carry parameters for
// other tools.
func parseSessionConfig(params map[string]string, instances, cpus int) (sessionConfig, error) {
	cfg := sessionConfig{intraThreads: 1, interThreads: 1}
	var err error
	if cfg.intraThreads, err = threadParam(params, ParamIntraOpThreads, 1); err != nil {
		return cfg, err
	}
	if cfg.interThreads, err = threadParam(params, ParamInterOpThreads, 1); err != nil {
		return cfg, err
	}
	if v, ok := params[ParamGraphOptLevel]; ok {
		if cfg.level, err = parseGraphLevel(v); err != nil {
			return cfg, err
		}
	}
	if instances < 1 {
		instances = 1
	}
	effective := func(n int) int {
		if n == 0 {
			return cpus
		}
		return n
	}
	cfg.intraSpin = instances*effective(cfg.intraThreads) <= cpus
	cfg.interSpin = instances*effective(cfg.interThreads) <= cpus
	return cfg, nil
}

// maxThreads bounds thread-count parameters to something a machine can hold.
const maxThreads = 1024

func threadParam(params map[string]string, name string, def int) (int, error) {
	v, ok := params[name]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 || n > maxThreads {
		return 0, fmt.Errorf("parameter %s: %q is not a thread count (an integer from 0 to %d; 0 means one per core)", name, v, maxThreads)
	}
	return n, nil
}

func parseGraphLevel(v string) (graphLevel, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "disable_all", "ort_disable_all":
		return levelDisableAll, nil
	case "basic", "ort_enable_basic":
		return levelBasic, nil
	case "extended", "ort_enable_extended":
		return levelExtended, nil
	case "all", "ort_enable_all":
		return levelAll, nil
	}
	return levelDefault, fmt.Errorf("parameter %s: %q is not one of disable_all, basic, extended, all", ParamGraphOptLevel, v)
}
