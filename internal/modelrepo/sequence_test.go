package modelrepo

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/authz"
	"github.com/sluice-ml/sluice/internal/batch/sequence"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelconfig"
)

// sequence_batching as Triton's model configuration documents it turns
// into the scheduler's options: control values in the type their
// false/true pair is written in, the strategy, the idle timeout and the
// implicit state with its initial value from the version's
// initial_state folder.
func TestSequenceOptions(t *testing.T) {
	const text = `
name: "m"
max_batch_size: 2
input { name: "x" data_type: TYPE_FP32 dims: [ 1 ] }
output { name: "y" data_type: TYPE_FP32 dims: [ 1 ] }
sequence_batching {
  max_sequence_idle_microseconds: 2500
  control_input [
    { name: "S" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1.5 ] } ] },
    { name: "E" control [ { kind: CONTROL_SEQUENCE_END bool_false_true: [ false, true ] } ] },
    { name: "R" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ -1, 7 ] } ] },
    { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] }
  ]
  state { input_name: "h" output_name: "h_out" data_type: TYPE_INT32 dims: [ 2 ]
          initial_state { data_type: TYPE_INT32 dims: [ 2 ] data_file: "h.bin" } }
  oldest { max_candidate_sequences: 3 preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 100 }
}`
	cfg, src, err := modelconfig.Parse("config.pbtxt", []byte(text))
	require.NoError(t, err)
	modelconfig.ApplyDefaults(cfg, "m")
	require.Empty(t, modelconfig.Validate(cfg, src))
	vdir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(vdir, "initial_state"), 0o755))
	initial := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 3), 4)
	require.NoError(t, os.WriteFile(filepath.Join(vdir, "initial_state", "h.bin"), initial, 0o644))

	o, err := sequenceOptions("m", "1", cfg, vdir)
	require.NoError(t, err)
	require.Equal(t, sequence.Oldest, o.Strategy)
	require.Equal(t, 3, o.MaxCandidates)
	require.Equal(t, []int{2}, o.PreferredBatchSizes)
	require.Equal(t, 100*time.Microsecond, o.MaxQueueDelay)
	require.Equal(t, 2500*time.Microsecond, o.IdleTimeout)
	f32 := func(v float32) []byte { return binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)) }
	i32 := func(v int32) []byte { return binary.LittleEndian.AppendUint32(nil, uint32(v)) }
	require.Equal(t, []sequence.Control{
		{Kind: sequence.ControlStart, Input: "S", DataType: infer.FP32, False: f32(0), True: f32(1.5)},
		{Kind: sequence.ControlEnd, Input: "E", DataType: infer.Bool, False: []byte{0}, True: []byte{1}},
		{Kind: sequence.ControlReady, Input: "R", DataType: infer.Int32, False: i32(-1), True: i32(7)},
		{Kind: sequence.ControlCorrID, Input: "C", DataType: infer.Bytes},
	}, o.Controls)
	require.Equal(t, []sequence.State{{Input: "h", Output: "h_out", DataType: infer.Int32, Dims: infer.Shape{2}, Initial: initial}}, o.States)

	_, err = sequenceOptions("m", "1", cfg, t.TempDir())
	require.ErrorContains(t, err, "initial_state data_file", "a missing data file fails the load")
}

// Sluice's per-client bounds of a sequence model come from config.pbtxt
// parameters; a value that is not a whole number fails the load.
func TestSequenceClientParameters(t *testing.T) {
	opts := func(params string) (sequence.Options, error) {
		text := `name: "m"
max_batch_size: 4
input { name: "x" data_type: TYPE_FP32 dims: [ 1 ] }
output { name: "y" data_type: TYPE_FP32 dims: [ 1 ] }
sequence_batching { max_sequence_idle_microseconds: 60000000 }
` + params
		cfg, _, err := modelconfig.Parse("config.pbtxt", []byte(text))
		require.NoError(t, err)
		return sequenceOptions("m", "1", cfg, t.TempDir())
	}
	o, err := opts("")
	require.NoError(t, err)
	require.Zero(t, o.MaxSequencesPerClient, "the scheduler's default")
	o, err = opts(`parameters { key: "sluice.max_sequences_per_client" value { string_value: "2" } }
parameters { key: "sluice.sequence_contended_idle_microseconds" value { string_value: "250000" } }`)
	require.NoError(t, err)
	require.Equal(t, 2, o.MaxSequencesPerClient)
	require.Equal(t, 250*time.Millisecond, o.ContendedIdleTimeout)
	_, err = opts(`parameters { key: "sluice.max_sequences_per_client" value { string_value: "-1" } }`)
	require.ErrorContains(t, err, "sluice.max_sequences_per_client is \"-1\", want a whole number")
}

func TestInitialStateFileStaysInItsFolder(t *testing.T) {
	_, err := readInitialState(t.TempDir(), "../../etc/passwd")
	require.ErrorContains(t, err, "outside the initial_state folder")
}

func TestSequenceParams(t *testing.T) {
	id, start, end, ierr := sequenceParams(infer.Parameters{"sequence_id": int64(7), "sequence_start": true})
	require.Nil(t, ierr)
	require.Equal(t, sequence.CorrID{Num: 7}, id)
	require.True(t, start)
	require.False(t, end)
	for _, bad := range []infer.Parameters{
		{"sequence_id": int64(-1)},
		{"sequence_id": 1.5},
		{"sequence_start": "yes"},
		{"sequence_end": int64(1)},
	} {
		_, _, _, ierr := sequenceParams(bad)
		require.NotNil(t, ierr, "%v", bad)
		require.Equal(t, ReasonInvalidParameter, ierr.Reason)
	}
}

// A sequence's client is the credential's identity, else the caller's
// address without its port (one anonymous host opening many connections
// is one client); no caller at all is "" (not capped).
func TestSequenceClient(t *testing.T) {
	ctx := t.Context()
	require.Empty(t, sequenceClient(ctx))
	require.Equal(t, "id:dispatch", sequenceClient(authz.WithPrincipal(ctx, authz.Principal{ID: "dispatch", Via: authz.ViaToken, Addr: "10.0.0.7:5123"})))
	require.Equal(t, "id:CN=svc", sequenceClient(authz.WithPrincipal(ctx, authz.Principal{ID: "CN=svc", Via: authz.ViaMTLS, Addr: "10.0.0.7:5123"})))
	a := sequenceClient(authz.WithPrincipal(ctx, authz.Principal{ID: authz.AnonymousID, Via: authz.ViaOpen, Addr: "127.0.0.2:40000"}))
	b := sequenceClient(authz.WithPrincipal(ctx, authz.Principal{ID: authz.AnonymousID, Via: authz.ViaOpen, Addr: "127.0.0.2:40001"}))
	require.Equal(t, "addr:127.0.0.2", a)
	require.Equal(t, a, b)
	require.Equal(t, "addr:::1", sequenceClient(authz.WithPrincipal(ctx, authz.Principal{Via: authz.ViaOpen, Addr: "[::1]:80"})))
}
