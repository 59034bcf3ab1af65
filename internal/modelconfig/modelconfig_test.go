package modelconfig

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// load runs a file through Parse, ApplyDefaults and Validate the way the
// repository does, and returns every problem as text.
func load(t *testing.T, path string) (*inferencepb.ModelConfig, []string) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	cfg, src, err := Parse("config.pbtxt", data)
	if err != nil {
		var ps Errors
		require.ErrorAs(t, err, &ps)
		return nil, lines(ps)
	}
	ApplyDefaults(cfg, strings.TrimSuffix(filepath.Base(path), ".pbtxt"))
	return cfg, lines(Validate(cfg, src))
}

func lines(ps Errors) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Error()
	}
	return out
}

func TestGoodConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/good/*.pbtxt")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			cfg, problems := load(t, f)
			require.Empty(t, problems)
			require.NotEmpty(t, cfg.Input)

			// Every good config survives the JSON form used by the
			// configuration API.
			js, err := MarshalJSON(cfg)
			require.NoError(t, err)
			require.True(t, json.Valid(js), "%s", js)
			back, err := ParseJSON(js)
			require.NoError(t, err)
			require.True(t, proto.Equal(cfg, back), "round trip changed the config:\n%v\n%v", cfg, back)
		})
	}
}

func TestBadConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.pbtxt")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			var wants []string
			for l := range strings.SplitSeq(string(data), "\n") {
				if w, ok := strings.CutPrefix(l, "# want: "); ok {
					wants = append(wants, w)
				}
			}
			require.NotEmpty(t, wants, "a bad file lists the problems it expects")
			_, problems := load(t, f)
			require.Len(t, problems, len(wants), "problems:\n%s", strings.Join(problems, "\n"))
			for i, w := range wants {
				require.Contains(t, problems[i], w)
			}
		})
	}
}

func TestSimpleConfigFields(t *testing.T) {
	data, err := os.ReadFile("testdata/good/simple.pbtxt")
	require.NoError(t, err)
	cfg, src, err := Parse("models/simple/config.pbtxt", data)
	require.NoError(t, err)

	require.Equal(t, "onnxruntime_onnx", cfg.Platform)
	require.EqualValues(t, 8, cfg.MaxBatchSize)
	require.Len(t, cfg.Input, 2)
	require.Equal(t, "INPUT1", cfg.Input[1].Name)
	require.Equal(t, inferencepb.DataType_TYPE_INT32, cfg.Input[1].DataType)
	require.Equal(t, []int64{16}, cfg.Input[1].Dims)
	require.Equal(t, []int64{1, 3}, cfg.GetVersionPolicy().GetSpecific().GetVersions())
	db := cfg.GetDynamicBatching()
	require.Equal(t, []int32{4, 8}, db.PreferredBatchSize)
	require.EqualValues(t, 100, db.MaxQueueDelayMicroseconds)
	require.EqualValues(t, 2, db.PriorityLevels)
	require.EqualValues(t, 1, db.DefaultPriorityLevel)
	require.Equal(t, inferencepb.ModelQueuePolicy_DELAY, db.DefaultQueuePolicy.TimeoutAction)
	require.True(t, db.PriorityQueuePolicy[1].AllowTimeoutOverride)
	require.Equal(t, "1", cfg.Parameters["intra_op_thread_count"].GetStringValue())
	require.True(t, cfg.ModelWarmup[0].Inputs["INPUT0"].GetZeroData())
	require.EqualValues(t, 2, cfg.InstanceGroup[0].Count)

	for path, want := range map[string]string{
		"max_batch_size":                            "models/simple/config.pbtxt:4:1",
		"input[1]":                                  "models/simple/config.pbtxt:12:3",
		"input[1].dims":                             "models/simple/config.pbtxt:15:5",
		"input[1].dims[0]":                          "models/simple/config.pbtxt:15:13",
		"input[1].reshape":                          "models/simple/config.pbtxt:12:3", // falls back to the parent
		"version_policy.specific.versions[1]":       "models/simple/config.pbtxt:5:45",
		"dynamic_batching.preferred_batch_size[1]":  "models/simple/config.pbtxt:38:30",
		"dynamic_batching.priority_queue_policy[1]": "models/simple/config.pbtxt:43:3",
		`parameters["execution_mode"]`:              "models/simple/config.pbtxt:49:1",
		`model_warmup[0].inputs["INPUT1"].dims`:     "models/simple/config.pbtxt:60:37",
		"instance_group[0].kind":                    "models/simple/config.pbtxt:34:5",
		"no_such_field":                             "models/simple/config.pbtxt",
	} {
		require.Equal(t, want, src.Pos(path).String(), path)
	}
}

func TestPositionAndProblems(t *testing.T) {
	require.Equal(t, "c.pbtxt:3:7", Position{File: "c.pbtxt", Line: 3, Col: 7}.String())
	require.Equal(t, "c.pbtxt:3", Position{File: "c.pbtxt", Line: 3}.String())
	require.Equal(t, "c.pbtxt", Position{File: "c.pbtxt"}.String())
	require.Equal(t, "bad", Error{Msg: "bad"}.Error())

	var src *Source
	require.Equal(t, Position{}, src.Pos("input[0]"))

	require.NoError(t, Errors(nil).Err())
	ps := Errors{
		{Pos: Position{File: "a", Line: 1, Col: 2}, Msg: "first"},
		{Pos: Position{File: "a", Line: 5, Col: 1}, Msg: "second"},
	}
	err := ps.Err()
	require.Equal(t, "invalid model configuration: a:1:2: first\na:5:1: second", err.Error())
	var ie *apierr.Error
	require.ErrorAs(t, err, &ie)
	require.Equal(t, apierr.KindInvalid, ie.Kind)
	require.Equal(t, ReasonInvalidConfig, ie.Reason)
	var got Errors
	require.True(t, errors.As(err, &got))
	require.Equal(t, ps, got)
}

func TestMarshalJSONTritonShape(t *testing.T) {
	data, err := os.ReadFile("testdata/good/simple.pbtxt")
	require.NoError(t, err)
	cfg, _, err := Parse("config.pbtxt", data)
	require.NoError(t, err)
	js, err := MarshalJSON(cfg)
	require.NoError(t, err)

	var doc map[string]any
	require.NoError(t, json.Unmarshal(js, &doc))
	require.Equal(t, "simple", doc["name"])
	require.Equal(t, 8.0, doc["max_batch_size"])
	in0 := doc["input"].([]any)[0].(map[string]any)
	require.Equal(t, "TYPE_INT32", in0["data_type"])
	require.Equal(t, []any{16.0}, in0["dims"], "int64 lists are numbers, as Triton writes them")
	require.Equal(t, false, in0["optional"], "scalars are written even when default")
	require.Equal(t, "FORMAT_NONE", in0["format"])
	require.NotContains(t, in0, "reshape", "unset messages are left out")
	require.Equal(t, []any{}, doc["batch_input"], "empty lists are written")
	db := doc["dynamic_batching"].(map[string]any)
	require.Equal(t, 100.0, db["max_queue_delay_microseconds"])
	require.Contains(t, db["priority_queue_policy"], "1")
	require.NotContains(t, doc, "sequence_batching", "unset oneof members are left out")
	require.Equal(t, map[string]any{"string_value": "1"}, doc["parameters"].(map[string]any)["intra_op_thread_count"])

	_, err = MarshalJSON(nil)
	require.Error(t, err)
}

func TestParseJSON(t *testing.T) {
	for _, tc := range []struct {
		name, in, wantErr string
	}{
		{name: "proto names", in: `{"name":"m","max_batch_size":4,"input":[{"name":"x","data_type":"TYPE_FP32","dims":[3]}]}`},
		{name: "json names and quoted int64", in: `{"name":"m","maxBatchSize":4,"input":[{"name":"x","dataType":"TYPE_FP32","dims":["3"]}]}`},
		{name: "unknown field", in: `{"name":"m","max_batch_sizee":4}`, wantErr: "max_batch_sizee"},
		// What GET .../config answers (with Sluice's loaded_at) loads back
		// unchanged as an override.
		{name: "sluice extension dropped", in: `{"name":"m","max_batch_size":4,"input":[{"name":"x","data_type":"TYPE_FP32","dims":[3]}],"loaded_at":"2026-12-07T04:00:00Z"}`},
		{name: "unknown field beside an extension", in: `{"name":"m","loaded_at":"x","max_batch_sizee":4}`, wantErr: "max_batch_sizee"},
		{name: "bad enum", in: `{"input":[{"data_type":"FP32"}]}`, wantErr: "FP32"},
		{name: "not json", in: `name: "m"`, wantErr: "parse model configuration JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseJSON([]byte(tc.in))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				var ie *apierr.Error
				require.ErrorAs(t, err, &ie)
				require.Equal(t, apierr.KindInvalid, ie.Kind)
				return
			}
			require.NoError(t, err)
			require.EqualValues(t, 4, cfg.MaxBatchSize)
			require.Equal(t, []int64{3}, cfg.Input[0].Dims)
			require.Equal(t, inferencepb.DataType_TYPE_FP32, cfg.Input[0].DataType)
		})
	}
}

func TestParseReportsLaterErrorsWithStablePositions(t *testing.T) {
	// Blanking the first bad field must not shift the columns of a later
	// error on the same line, even with multi-byte characters before it.
	in := "name: \"é\" bogus: \"ü\" other: 1\n"
	_, _, err := Parse("c.pbtxt", []byte(in))
	var ps Errors
	require.ErrorAs(t, err, &ps)
	require.Len(t, ps, 2)
	require.Equal(t, `c.pbtxt:1:11: unknown field "bogus" in inference.ModelConfig`, ps[0].Error())
	require.Equal(t, `c.pbtxt:1:22: unknown field "other" in inference.ModelConfig`, ps[1].Error())
}

func TestDataTypeMapping(t *testing.T) {
	for v := range inferencepb.DataType_name {
		dt := inferencepb.DataType(v)
		require.Equal(t, dt, FromInfer(ToInfer(dt)), dt.String())
	}
	require.Equal(t, infer.Bytes, ToInfer(inferencepb.DataType_TYPE_STRING))
	require.Equal(t, inferencepb.DataType_TYPE_STRING, FromInfer(infer.Bytes))
	require.Equal(t, infer.FP32, ToInfer(inferencepb.DataType_TYPE_FP32))
	require.Equal(t, infer.Invalid, ToInfer(inferencepb.DataType(99)))
	require.Equal(t, inferencepb.DataType_TYPE_INVALID, FromInfer(infer.DataType(99)))
}

func TestApplyDefaults(t *testing.T) {
	t.Run("empty config", func(t *testing.T) {
		cfg := &inferencepb.ModelConfig{}
		ApplyDefaults(cfg, "folder")
		require.Equal(t, "folder", cfg.Name)
		require.EqualValues(t, 1, cfg.GetVersionPolicy().GetLatest().GetNumVersions())
		require.Len(t, cfg.InstanceGroup, 1)
		require.Equal(t, inferencepb.ModelInstanceGroup_KIND_CPU, cfg.InstanceGroup[0].Kind)
		require.Zero(t, cfg.InstanceGroup[0].Count, "the count waits for the backend")
		require.Equal(t, "folder_0", cfg.InstanceGroup[0].Name)
		cfg.Backend = "onnxruntime"
		ApplyDefaults(cfg, "folder")
		require.EqualValues(t, 2, cfg.InstanceGroup[0].Count, "Triton's CPU default for ONNX Runtime")
	})
	// Triton's default count of a KIND_CPU group without one is 2 for
	// ONNX Runtime and 1 for the other backends (its model configuration
	// guide, "CPU Model Instance"; qa/L0_model_config
	// autofill_noplatform_success/onnx/cpu_instance expects count: 2).
	t.Run("count by backend", func(t *testing.T) {
		for _, c := range []struct {
			backend, platform string
			kind              inferencepb.ModelInstanceGroup_Kind
			want              int32
		}{
			{"onnxruntime", "", inferencepb.ModelInstanceGroup_KIND_CPU, 2},
			{"", "onnxruntime_onnx", inferencepb.ModelInstanceGroup_KIND_CPU, 2},
			{"onnxruntime", "", inferencepb.ModelInstanceGroup_KIND_AUTO, 2},
			{"onnxruntime", "", inferencepb.ModelInstanceGroup_KIND_MODEL, 1},
			{"python", "", inferencepb.ModelInstanceGroup_KIND_CPU, 1},
			{"pytorch", "pytorch_libtorch", inferencepb.ModelInstanceGroup_KIND_CPU, 1},
		} {
			cfg := &inferencepb.ModelConfig{
				Backend: c.backend, Platform: c.platform,
				InstanceGroup: []*inferencepb.ModelInstanceGroup{{Kind: c.kind}, {Kind: c.kind, Count: 3}},
			}
			ApplyDefaults(cfg, "m")
			require.Equal(t, c.want, cfg.InstanceGroup[0].Count, "%+v", c)
			require.EqualValues(t, 3, cfg.InstanceGroup[1].Count, "a count given is kept")
		}
		cfg := &inferencepb.ModelConfig{Backend: "onnxruntime"}
		ApplyDefaults(cfg, "m")
		require.EqualValues(t, 2, cfg.InstanceGroup[0].Count, "no instance_group at all")
	})
	t.Run("keeps user values", func(t *testing.T) {
		cfg := &inferencepb.ModelConfig{
			Name:          "named",
			VersionPolicy: &inferencepb.ModelVersionPolicy{PolicyChoice: &inferencepb.ModelVersionPolicy_All_{All: &inferencepb.ModelVersionPolicy_All{}}},
			InstanceGroup: []*inferencepb.ModelInstanceGroup{
				{Name: "g", Kind: inferencepb.ModelInstanceGroup_KIND_AUTO},
				{Kind: inferencepb.ModelInstanceGroup_KIND_GPU, Count: 3},
			},
			SchedulingChoice: &inferencepb.ModelConfig_DynamicBatching{DynamicBatching: &inferencepb.ModelDynamicBatching{PriorityLevels: 5}},
		}
		ApplyDefaults(cfg, "folder")
		require.Equal(t, "named", cfg.Name)
		require.NotNil(t, cfg.GetVersionPolicy().GetAll())
		require.Equal(t, "g", cfg.InstanceGroup[0].Name)
		require.Equal(t, inferencepb.ModelInstanceGroup_KIND_CPU, cfg.InstanceGroup[0].Kind)
		require.Zero(t, cfg.InstanceGroup[0].Count, "no backend named yet")
		require.Equal(t, inferencepb.ModelInstanceGroup_KIND_GPU, cfg.InstanceGroup[1].Kind, "an explicit GPU stays for Validate to reject")
		require.EqualValues(t, 3, cfg.InstanceGroup[1].Count)
		require.Zero(t, cfg.GetDynamicBatching().DefaultPriorityLevel, "no default priority level is made up: Validate refuses a missing one, as Triton does")
	})
	t.Run("ensemble gets no instances", func(t *testing.T) {
		cfg := &inferencepb.ModelConfig{Platform: "ensemble"}
		ApplyDefaults(cfg, "e")
		require.Empty(t, cfg.InstanceGroup)
	})
	t.Run("sequence idle", func(t *testing.T) {
		cfg := &inferencepb.ModelConfig{SchedulingChoice: &inferencepb.ModelConfig_SequenceBatching{SequenceBatching: &inferencepb.ModelSequenceBatching{}}}
		ApplyDefaults(cfg, "s")
		require.EqualValues(t, 1_000_000, cfg.GetSequenceBatching().MaxSequenceIdleMicroseconds)
	})
	ApplyDefaults(nil, "x") // must not panic
}

func spec(name string, dt infer.DataType, shape ...int64) infer.TensorSpec {
	return infer.TensorSpec{Name: name, DataType: dt, Shape: shape}
}

func TestAutoComplete(t *testing.T) {
	batchSig := infer.Signature{
		Inputs:  []infer.TensorSpec{spec("user_features", infer.FP32, -1, 128), spec("ids", infer.Int64, -1, -1)},
		Outputs: []infer.TensorSpec{spec("score", infer.FP32, -1)},
	}
	fixedSig := infer.Signature{
		Inputs:  []infer.TensorSpec{spec("x", infer.FP32, 1, 3)},
		Outputs: []infer.TensorSpec{spec("y", infer.FP32)},
	}
	for _, tc := range []struct {
		name    string
		cfg     string
		sig     infer.Signature
		wantMax int32
		want    string // prototext of the expected inputs and outputs
		wantErr string
		agrees  bool // the completed config passes ValidateSignature
	}{
		{
			name:    "batching model, nothing listed",
			sig:     batchSig,
			agrees:  true,
			wantMax: DefaultMaxBatchSize,
			want: `input { name: "user_features" data_type: TYPE_FP32 dims: 128 }
				input { name: "ids" data_type: TYPE_INT64 dims: -1 }
				output { name: "score" data_type: TYPE_FP32 dims: 1 reshape {} }`,
		},
		{
			name:    "fixed first dim cannot batch",
			sig:     fixedSig,
			agrees:  true,
			wantMax: 0,
			want: `input { name: "x" data_type: TYPE_FP32 dims: [1, 3] }
				output { name: "y" data_type: TYPE_FP32 dims: 1 reshape {} }`,
		},
		{
			name:    "user max_batch_size and partial input kept",
			cfg:     `max_batch_size: 16 input { name: "ids" dims: [ 7 ] } output { name: "score" data_type: TYPE_FP64 }`,
			sig:     batchSig,
			wantMax: 16,
			want: `input { name: "ids" data_type: TYPE_INT64 dims: 7 }
				output { name: "score" data_type: TYPE_FP64 dims: 1 reshape {} }`,
		},
		{
			name:    "full-rank dims mean no batching",
			cfg:     `input { name: "user_features" dims: [ -1, 128 ] }`,
			sig:     batchSig,
			wantMax: 0,
			want: `input { name: "user_features" data_type: TYPE_FP32 dims: [-1, 128] }
				output { name: "score" data_type: TYPE_FP32 dims: -1 }`,
		},
		{
			name:    "unknown listed tensor left alone",
			cfg:     `max_batch_size: 2 input { name: "nope" }`,
			sig:     batchSig,
			wantMax: 2,
			want: `input { name: "nope" }
				output { name: "score" data_type: TYPE_FP32 dims: 1 reshape {} }`,
		},
		{
			name:    "scalar with batching",
			cfg:     `max_batch_size: 2`,
			sig:     fixedSig,
			wantMax: 2,
			wantErr: "output 'y': max_batch_size is 2 but the model's output is a scalar",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := Parse("config.pbtxt", []byte(tc.cfg))
			require.NoError(t, err)
			err = AutoComplete(cfg, tc.sig)
			require.Equal(t, tc.wantMax, cfg.MaxBatchSize)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			want := &inferencepb.ModelConfig{}
			require.NoError(t, prototext.Unmarshal([]byte(tc.want), want))
			got := &inferencepb.ModelConfig{Input: cfg.Input, Output: cfg.Output}
			require.True(t, proto.Equal(want, got), "got %v\nwant %v", got, want)
			if tc.agrees {
				require.Empty(t, ValidateSignature(cfg, tc.sig, nil), "autocompleted config agrees with the model")
			}
		})
	}
	require.Error(t, AutoComplete(nil, batchSig))
}

func TestValidateSignature(t *testing.T) {
	sig := infer.Signature{
		Inputs:  []infer.TensorSpec{spec("user_features", infer.FP32, -1, 128), spec("ids", infer.Int64, -1, -1)},
		Outputs: []infer.TensorSpec{spec("score", infer.FP32, -1, 1)},
	}
	fixed := infer.Signature{
		Inputs:  []infer.TensorSpec{spec("x", infer.FP32, 1, 3)},
		Outputs: []infer.TensorSpec{spec("y", infer.FP32, 1)},
	}
	const good = `
max_batch_size: 8
input { name: "user_features" data_type: TYPE_FP32 dims: [ 128 ] }
input { name: "ids" data_type: TYPE_INT64 dims: [ 5 ] }
output { name: "score" data_type: TYPE_FP32 dims: [ 1 ] }
`
	for _, tc := range []struct {
		name string
		cfg  string
		sig  infer.Signature
		want []string
	}{
		{name: "batching model matches", cfg: good, sig: sig},
		{
			name: "non-batching model matches", sig: fixed, cfg: `input { name: "x" data_type: TYPE_FP32 dims: [1, 3] } output { name: "y" data_type: TYPE_FP32 dims: [-1] }`,
			want: []string{"config.pbtxt:1:95: output 'y': config dims [-1] do not match the model's [1]"},
		},
		{name: "reshape is what the model sees", sig: fixed, cfg: `input { name: "x" data_type: TYPE_FP32 dims: [3] reshape { shape: [1, 3] } } output { name: "y" data_type: TYPE_FP32 dims: [1] }`},
		{
			name: "mismatched dims",
			sig:  sig,
			cfg:  strings.Replace(good, "[ 128 ]", "[ 127 ]", 1),
			want: []string{"config.pbtxt:3:52: input 'user_features': config dims [127] do not match the model's [-1,128]"},
		},
		{
			name: "wrong type",
			sig:  sig,
			cfg:  strings.Replace(good, "TYPE_INT64", "TYPE_INT32", 1),
			want: []string{"config.pbtxt:4:21: input 'ids': config data_type TYPE_INT32 does not match the model's TYPE_INT64"},
		},
		{
			name: "unknown tensor and unlisted input",
			sig:  sig,
			cfg:  strings.Replace(good, `"ids"`, `"idz"`, 1),
			want: []string{
				"config.pbtxt:3:1: input 'ids': the model has this input (TYPE_INT64 [-1,-1]) but the configuration does not list it",
				"config.pbtxt:4:9: input 'idz': the model has no such input; its inputs are [user_features, ids]",
			},
		},
		{
			name: "unknown output",
			sig:  sig,
			cfg:  strings.Replace(good, `"score"`, `"prob"`, 1),
			want: []string{"output 'prob': the model has no such output; its outputs are [score]"},
		},
		{
			name: "fixed first dim with batching",
			sig:  fixed,
			cfg:  `max_batch_size: 8 input { name: "x" data_type: TYPE_FP32 dims: [3] } output { name: "y" data_type: TYPE_FP32 dims: [] reshape { shape: [] } }`,
			want: []string{
				"config.pbtxt:1:19: input 'x': max_batch_size is 8 but the model's first dimension is fixed at 1",
				"output 'y': max_batch_size is 8 but the model's first dimension is fixed at 1",
			},
		},
		{
			name: "batch dim written into dims",
			sig:  sig,
			cfg:  strings.Replace(good, "[ 128 ]", "[ -1, 128 ]", 1),
			want: []string{"input 'user_features': config dims [-1,128] do not match the model's [-1,128]"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, src, err := Parse("config.pbtxt", []byte(tc.cfg))
			require.NoError(t, err)
			got := lines(ValidateSignature(cfg, tc.sig, src))
			require.Len(t, got, len(tc.want), "got:\n%s", strings.Join(got, "\n"))
			for i, w := range tc.want {
				require.Contains(t, got[i], w)
			}
		})
	}
}

func TestClientSignature(t *testing.T) {
	cfg, _, err := Parse("c", []byte(`max_batch_size: 4
		input { name: "a" data_type: TYPE_STRING dims: [2] reshape { shape: [1, 2] } }
		output { name: "b" data_type: TYPE_FP16 dims: [-1, 3] }`))
	require.NoError(t, err)
	require.Equal(t, infer.Signature{
		Inputs:  []infer.TensorSpec{spec("a", infer.Bytes, -1, 2)},
		Outputs: []infer.TensorSpec{spec("b", infer.FP16, -1, -1, 3)},
	}, ClientSignature(cfg))

	cfg.MaxBatchSize = 0
	require.Equal(t, infer.Shape{2}, ClientSignature(cfg).Inputs[0].Shape)
}

// Modelled on qa/L0_simple_ensemble/test.sh, which greps the server log
// for protobuf's words about bad max_inflight_requests values.
func TestParseBadIntegerProtobufWords(t *testing.T) {
	for value, want := range map[string]string{
		`-5`:              "Expected integer, got: -",
		`"invalid_value"`: `Expected integer, got: "invalid_value"`,
		`12345678901`:     "Integer out of range (12345678901)",
	} {
		in := "platform: \"ensemble\"\nensemble_scheduling {\n  max_inflight_requests: " + value + "\n}\n"
		_, _, err := Parse("c.pbtxt", []byte(in))
		var ps Errors
		require.ErrorAs(t, err, &ps, value)
		require.Len(t, ps, 1, value)
		require.Contains(t, ps[0].Error(), `field "max_inflight_requests": invalid value `+value, value)
		require.Contains(t, ps[0].Error(), want, value)
	}
	_, _, err := Parse("c.pbtxt", []byte("max_batch_size: -9999999999\n"))
	require.ErrorContains(t, err, "Integer out of range (-9999999999)")
}
