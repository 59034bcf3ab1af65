package python

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/modelconfig"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

var _ backend.ConfigCompleter = (*Backend)(nil)

// completeScript is the worker folder's runner of auto_complete_config.
const completeScript = "sluice_autocomplete.py"

// completeTimeout bounds one version's auto_complete_config run: an
// import of model.py and one call.
const completeTimeout = time.Minute

// completeRequest is sluice_autocomplete.py's input.
type completeRequest struct {
	ModelFile   string          `json:"model_file"`
	ModelConfig json.RawMessage `json:"model_config"`
}

// completeAnswer is sluice_autocomplete.py's output: Defined is false
// when TritonPythonModel has no auto_complete_config; Error is set when
// importing the model or the call failed.
type completeAnswer struct {
	Defined     bool            `json:"defined"`
	ModelConfig json.RawMessage `json:"model_config"`
	Error       string          `json:"error"`
	Traceback   string          `json:"traceback"`
}

// CompleteConfig runs the version's TritonPythonModel.auto_complete_config,
// when model.py defines one, in a short-lived Python process, as Triton
// does at load: the static method gets a pb_utils.ModelConfig holding
// cfg and returns it completed (add_input, add_output,
// set_max_batch_size, set_dynamic_batching, add_model_warmup, ...). A
// version without a readable model.py, or whose class defines no such
// method, gets cfg back; the caller then reports what is missing. A
// model.py that does not mention auto_complete_config is not run.
func (b *Backend) CompleteConfig(ctx context.Context, versionDir string, cfg *inferencepb.ModelConfig) (*inferencepb.ModelConfig, error) {
	file := cfg.GetDefaultModelFilename()
	if file == "" {
		file = b.DefaultFilename()
	}
	path, err := filepath.Abs(filepath.Join(versionDir, file))
	if err != nil {
		return nil, err
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return cfg, nil //nolint:nilerr // ConfigSignature and Load report a missing or unreadable model file
	}
	if !bytes.Contains(src, []byte("auto_complete_config")) {
		// Most models define none: spare their load a Python process.
		return cfg, nil
	}
	cfgJSON, err := modelconfig.MarshalJSON(cfg)
	if err != nil {
		return nil, err
	}
	var ans completeAnswer
	if err := b.runScript(ctx, completeScript, completeTimeout, completeRequest{ModelFile: path, ModelConfig: cfgJSON}, &ans); err != nil {
		return nil, fmt.Errorf("model '%s': auto_complete_config: %w", cfg.GetName(), err)
	}
	switch {
	case ans.Error != "":
		if ans.Traceback != "" {
			b.logger.Warn("python model auto_complete_config failed", "model", cfg.GetName(), "traceback", ans.Traceback)
		}
		return nil, fmt.Errorf("model '%s': auto_complete_config: %s", cfg.GetName(), ans.Error)
	case !ans.Defined:
		return cfg, nil
	}
	out, err := modelconfig.ParseJSON(ans.ModelConfig)
	if err != nil {
		return nil, fmt.Errorf("model '%s': the configuration auto_complete_config returned: %w", cfg.GetName(), err)
	}
	if out.GetName() != cfg.GetName() {
		return nil, fmt.Errorf("model '%s': auto_complete_config renamed the model to '%s'", cfg.GetName(), out.GetName())
	}
	if out.GetBackend() != cfg.GetBackend() && cfg.GetBackend() != "" {
		return nil, fmt.Errorf("model '%s': auto_complete_config changed the backend to '%s'", cfg.GetName(), out.GetBackend())
	}
	return out, nil
}
