package python

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// writeModel writes a model.py into a fresh version folder and returns
// the folder.
func writeModel(t *testing.T, code string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "m", "1")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.py"), []byte(code), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// CompleteConfig runs the model's auto_complete_config, as Triton does for
// qa/L0_parameters' "parameter" model, which has no config.pbtxt: its
// static method adds the input and outputs and sets max_batch_size 0.
func TestCompleteConfig(t *testing.T) {
	b, _ := testBackend(t, Options{})
	vdir := filepath.Dir(modelPath(t, "params"))

	t.Run("completes an empty configuration", func(t *testing.T) {
		cfg := testConfig(t, "params", `backend: "python"`)
		orig := proto.CloneOf(cfg)
		got, err := b.CompleteConfig(t.Context(), vdir, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(cfg, orig) {
			t.Error("CompleteConfig modified its argument")
		}
		if len(got.GetInput()) != 1 || got.GetInput()[0].GetName() != "INPUT0" || got.GetInput()[0].GetDataType() != inferencepb.DataType_TYPE_FP32 ||
			len(got.GetInput()[0].GetDims()) != 1 || got.GetInput()[0].GetDims()[0] != 1 {
			t.Errorf("input = %v, want INPUT0 FP32 [1]", got.GetInput())
		}
		if len(got.GetOutput()) != 1 || got.GetOutput()[0].GetName() != "PARAMS" || got.GetOutput()[0].GetDataType() != inferencepb.DataType_TYPE_STRING {
			t.Errorf("output = %v, want PARAMS STRING", got.GetOutput())
		}
		if got.GetName() != "params" || got.GetBackend() != "python" || got.GetMaxBatchSize() != 0 {
			t.Errorf("name %q backend %q max_batch_size %d changed", got.GetName(), got.GetBackend(), got.GetMaxBatchSize())
		}
		if _, err := b.ConfigSignature(t.Context(), vdir, got); err != nil {
			t.Errorf("the completed configuration has no signature: %v", err)
		}
	})

	t.Run("keeps what the configuration says", func(t *testing.T) {
		cfg := testConfig(t, "params", `backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]`)
		got, err := b.CompleteConfig(t.Context(), vdir, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.GetInput()) != 1 || len(got.GetOutput()) != 1 {
			t.Errorf("input %v output %v, want one each", got.GetInput(), got.GetOutput())
		}
	})

	t.Run("model without auto_complete_config", func(t *testing.T) {
		cfg := testConfig(t, "identity", identityConfig)
		got, err := b.CompleteConfig(t.Context(), filepath.Dir(modelPath(t, "identity")), cfg)
		if err != nil || !proto.Equal(got, cfg) {
			t.Errorf("CompleteConfig = %v, %v; want the configuration unchanged", got, err)
		}
	})

	t.Run("missing model.py is left to ConfigSignature", func(t *testing.T) {
		cfg := testConfig(t, "m", `backend: "python"`)
		if got, err := b.CompleteConfig(t.Context(), t.TempDir(), cfg); err != nil || got != cfg {
			t.Errorf("CompleteConfig = %v, %v; want cfg, nil", got, err)
		}
	})

	for _, tt := range []struct {
		name, cfg, code, wantErr string
	}{
		{
			name: "max_batch_size disagrees",
			cfg:  `backend: "python" max_batch_size: 8`,
			code: `
class TritonPythonModel:
    @staticmethod
    def auto_complete_config(c):
        c.set_max_batch_size(4)
        return c
`,
			wantErr: "model 'm': auto_complete_config: ValueError: the configuration of model 'm' sets max_batch_size 8, but auto_complete_config sets 4 (model.py:",
		},
		{
			name: "dims disagree",
			cfg:  `backend: "python" input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]`,
			code: `
class TritonPythonModel:
    @staticmethod
    def auto_complete_config(c):
        c.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [3]})
        return c
`,
			wantErr: "input 'X' of model 'm': the configuration has dims [2], auto_complete_config [3]",
		},
		{
			name: "returns None",
			cfg:  `backend: "python"`,
			code: `
class TritonPythonModel:
    @staticmethod
    def auto_complete_config(c):
        c.set_max_batch_size(0)
`,
			wantErr: "auto_complete_config returned NoneType; it must return the ModelConfig it was given",
		},
		{
			name: "unknown field",
			cfg:  `backend: "python"`,
			code: `
class TritonPythonModel:
    @staticmethod
    def auto_complete_config(c):
        c.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [1], "colour": "red"})
        return c
`,
			wantErr: "model 'm': the configuration auto_complete_config returned: parse model configuration JSON",
		},
		{
			name:    "import fails",
			cfg:     `backend: "python"`,
			code:    "import no_such_module_for_sluice\n\n\nclass TritonPythonModel:\n    auto_complete_config = None\n",
			wantErr: "model 'm': auto_complete_config: import model.py: ModuleNotFoundError",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.CompleteConfig(t.Context(), writeModel(t, tt.code), testConfig(t, "m", tt.cfg))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("CompleteConfig error = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}
