package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/grpcapi"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelrepo"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/release/diff"
	"github.com/sluice-ml/sluice/internal/release/record"
	"github.com/sluice-ml/sluice/internal/release/replay"
)

// shadowModel is a model server with one deterministic model,
// "parcel_eta": eta_prediction = 10 + 3·x0 + 0.5·x1 (×1.5 in version 2)
// from the FP32 input "features" [1,2].
type shadowModel struct{}

func shadowETA(x0, x1 float32, version string) float32 {
	eta := 10 + 3*x0 + 0.5*x1
	if version == "2" {
		eta *= 1.5
	}
	return eta
}

func (shadowModel) Infer(_ context.Context, req *infer.Request) (*infer.Response, error) {
	in := req.Input("features")
	if req.Model != "parcel_eta" || in == nil || len(in.Data) != 8 {
		return nil, apierr.Errorf(apierr.KindNotFound, "model_not_found", "no model %q with input features", req.Model)
	}
	x0 := math.Float32frombits(binary.LittleEndian.Uint32(in.Data))
	x1 := math.Float32frombits(binary.LittleEndian.Uint32(in.Data[4:]))
	v := req.Version
	if v == "" {
		v = "1"
	}
	eta := shadowETA(x0, x1, v)
	return &infer.Response{ID: req.ID, Model: req.Model, Version: v, Outputs: []infer.Tensor{{
		Name: "eta_prediction", DataType: infer.FP32, Shape: infer.Shape{1, 1},
		Data: binary.LittleEndian.AppendUint32(nil, math.Float32bits(eta)),
	}}}, nil
}

func (shadowModel) Metadata(context.Context, string, string) (*modelrepo.Metadata, error) {
	return &modelrepo.Metadata{Name: "parcel_eta"}, nil
}

func (shadowModel) Config(context.Context, string, string) (*inferencepb.ModelConfig, error) {
	return &inferencepb.ModelConfig{Name: "parcel_eta"}, nil
}
func (shadowModel) ModelReady(context.Context, string, string) error          { return nil }
func (shadowModel) Live() bool                                                { return true }
func (shadowModel) Ready() bool                                               { return true }
func (shadowModel) Index(context.Context, bool) []modelrepo.IndexEntry        { return nil }
func (shadowModel) Load(context.Context, string, modelrepo.LoadOptions) error { return nil }
func (shadowModel) Unload(context.Context, string, modelrepo.UnloadOptions) error {
	return nil
}

func (shadowModel) Statistics(context.Context, string, string) ([]modelrepo.ModelStats, error) {
	return nil, nil
}

func startShadowModel(t *testing.T) string {
	t.Helper()
	svc := grpcapi.New(shadowModel{}, grpcapi.Options{}, nil, nil)
	srv := grpcapi.NewServer(svc, grpcapi.ServerOptions{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		svc.Shutdown()
		srv.Stop()
		require.NoError(t, <-done)
	})
	return lis.Addr().String()
}

var shadowRegions = []string{"eu", "us", "apac", "latam"}

// shadowRecords are n recorded exchanges of parcel_eta version 1
// (primary) and 2 (shadow), with x-region headers.
func shadowRecords(n int) []*record.Record {
	base := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	recs := make([]*record.Record, n)
	for i := range n {
		x0, x1 := float32(i%17)/4, float32(i%29)+0.25
		data := fmt.Sprintf("[[%s,%s]]", strconv.FormatFloat(float64(x0), 'g', -1, 32), strconv.FormatFloat(float64(x1), 'g', -1, 32))
		id := fmt.Sprintf("req-%04d", i)
		recs[i] = &record.Record{
			RequestID: id, Time: base.Add(time.Duration(i) * time.Second), Service: "parcel-eta",
			Headers: map[string]string{"x-request-id": id, "x-region": shadowRegions[i%len(shadowRegions)]},
			Request: map[string]any{"user_id": json.Number(strconv.Itoa(i))},
			Inputs:  []record.Tensor{{Name: "features", DataType: "FP32", Shape: []int64{1, 2}, Data: json.RawMessage(data)}},
			Arms: map[string]record.Arm{
				record.ArmPrimary: {Model: "parcel_eta", Version: "1", Status: 200, LatencyMS: 30, Outputs: map[string][]float64{"eta_prediction": {float64(shadowETA(x0, x1, "1"))}}},
				record.ArmShadow:  {Model: "parcel_eta", Version: "2", Status: 200, LatencyMS: 30, Outputs: map[string][]float64{"eta_prediction": {float64(shadowETA(x0, x1, "2"))}}},
			},
		}
	}
	return recs
}

func writeShadowRecording(t *testing.T, recs []*record.Record) string {
	t.Helper()
	dir := t.TempDir()
	sink, err := record.NewFileSink(record.FileOptions{Dir: dir}, nil)
	require.NoError(t, err)
	_, err = sink.Write(t.Context(), recs)
	require.NoError(t, err)
	require.NoError(t, sink.Close(t.Context()))
	return dir
}

// runShadow runs `shadow ARGS` through the command constructor and
// returns stdout, stderr and the exit code Run would return.
func runShadow(ctx context.Context, t *testing.T, tty bool, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := newShadowCmdWith(shadowEnv{isTerminal: func(io.Writer) bool { return tty }, progressEvery: time.Millisecond})
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.ExecuteContext(ctx)
	switch ee, ok := errors.AsType[*exitError](err); {
	case err == nil:
	case ok:
		code = ee.code
		fmt.Fprintln(&errb, "sluice:", ee.err)
	default:
		code = 1
		fmt.Fprintln(&errb, "sluice:", err)
	}
	return out.String(), errb.String(), code
}

func TestShadowReplayThenDiff(t *testing.T) {
	addr := startShadowModel(t)
	orig := shadowRecords(200)
	from := writeShadowRecording(t, orig)
	out := filepath.Join(t.TempDir(), "replay")

	_, stderr, code := runShadow(t.Context(), t, true, "replay", "--from", from, "--to-grpc", addr,
		"--rate", "0", "--concurrency", "8", "--out", out)
	require.Zero(t, code, stderr)
	require.Contains(t, stderr, "\r[", "no progress bar on a terminal")
	require.Contains(t, stderr, "200/200 100%")
	require.Contains(t, stderr, "replayed 200 records in ")
	require.Contains(t, stderr, "0 errors, 200 written to "+out)

	src, err := record.OpenFiles(out, record.ReadOptions{})
	require.NoError(t, err)
	got, err := record.ReadAll(t.Context(), src)
	require.NoError(t, err)
	require.Len(t, got, 200)
	for i, r := range got {
		require.Equal(t, orig[i].RequestID, r.RequestID)
		require.Equal(t, orig[i].Arms[record.ArmPrimary].Outputs, r.Arms[record.ArmPrimary].Outputs)
		require.Len(t, r.Arms, 1)
	}
	files, err := filepath.Glob(filepath.Join(out, "replay-*.jsonl"))
	require.NoError(t, err)
	require.NotEmpty(t, files)

	report := filepath.Join(t.TempDir(), "report")
	stdout, stderr, code := runShadow(t.Context(), t, false, "diff", "--recording", from, "--against", out,
		"--labels", "recorded,replay", "--slice", "header:x-region", "--max-p95-regression", "-1", "--out", report)
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "PASSED: recorded (primary) vs replay (primary), 200 pairs compared")
	require.Contains(t, stdout, "report: "+filepath.Join(report, "report.html"))
	f, err := os.Open(filepath.Join(report, diff.JSONFile))
	require.NoError(t, err)
	defer f.Close()
	res, err := diff.ReadJSON(f)
	require.NoError(t, err)
	require.True(t, res.Passed)
	require.Zero(t, res.Outputs[0].Significant)
	require.FileExists(t, filepath.Join(report, diff.HTMLFile))

	// Without a terminal: no bar, the summary only.
	out2 := filepath.Join(t.TempDir(), "replay2")
	_, stderr, code = runShadow(t.Context(), t, false, "replay", "--from", from, "--to-grpc", addr,
		"--since", "2026-05-01T10:00:10Z", "--until", "2026-05-01T10:00:20Z", "--model", "parcel_eta", "--version", "2", "--out", out2)
	require.Zero(t, code, stderr)
	require.NotContains(t, stderr, "\r")
	require.Contains(t, stderr, "replayed 10 records")
}

func TestShadowDiffFailsOnARegionalRegression(t *testing.T) {
	recs := shadowRecords(400)
	for _, r := range recs {
		sh := r.Arms[record.ArmShadow]
		if r.Headers["x-region"] == "eu" {
			sh.Outputs = map[string][]float64{"eta_prediction": {r.Arms[record.ArmPrimary].Outputs["eta_prediction"][0] + 7}}
		} else {
			sh.Outputs = r.Arms[record.ArmPrimary].Outputs
		}
		r.Arms[record.ArmShadow] = sh
	}
	dir := writeShadowRecording(t, recs)
	report := filepath.Join(t.TempDir(), "report")
	stdout, stderr, code := runShadow(t.Context(), t, false, "diff", "--recording", dir, "--slice", "header:x-region",
		"--slice", "header:x-missing", "--out", report)
	require.Equal(t, exitGatesFailed, code, "stdout %s stderr %s", stdout, stderr)
	require.Contains(t, stdout, "FAILED: primary (primary) vs shadow (shadow), 400 pairs compared")
	require.Contains(t, stdout, "  significant_share[eta_prediction]@x-region=eu: ")
	require.Contains(t, stdout, "  ks[eta_prediction]@x-region=eu: ")
	require.NotContains(t, stdout, "@x-region=us")
	require.Contains(t, stdout, "warning: ")
	require.Contains(t, stdout, "x-missing")
	require.Contains(t, stderr, "diff gate(s) failed")
	require.FileExists(t, filepath.Join(report, diff.HTMLFile))
	require.FileExists(t, filepath.Join(report, diff.JSONFile))

	// With a threshold above the regression and KS off, the same recording
	// passes: the exit status follows the gates.
	_, _, code = runShadow(t.Context(), t, false, "diff", "--recording", dir, "--threshold", "10", "--ks-alpha", "-1", "--out", report)
	require.Zero(t, code)
}

func TestShadowUsageErrors(t *testing.T) {
	dir := writeShadowRecording(t, shadowRecords(3))
	out := t.TempDir()
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"replay without --from", []string{"replay", "--to-grpc", "x:1", "--out", out}, 2, "--from and --out are required"},
		{"replay without target", []string{"replay", "--from", dir, "--out", out}, 2, "exactly one of"},
		{"replay with two targets", []string{"replay", "--from", dir, "--to-grpc", "x:1", "--to-http", "http://x", "--out", out}, 2, "exactly one of"},
		{"replay service with a model", []string{"replay", "--from", dir, "--to-service", "http://x/v1/services/s:predict", "--model", "m", "--out", out}, 2, "apply to --to-grpc and --to-http only"},
		{"replay into its own recording", []string{"replay", "--from", dir, "--to-grpc", "x:1", "--out", dir}, 2, "is the recording being replayed"},
		{"replay bad since", []string{"replay", "--from", dir, "--to-grpc", "x:1", "--out", out, "--since", "yesterday"}, 2, "--since: invalid time"},
		{"replay empty window", []string{"replay", "--from", dir, "--to-grpc", "x:1", "--out", out, "--since", "2026-05-02", "--until", "2026-05-01"}, 2, "--since must be before --until"},
		{"replay bad header", []string{"replay", "--from", dir, "--to-http", "http://x", "--out", out, "--header", "nocolon"}, 2, `want "Name: value"`},
		{"replay bad http url", []string{"replay", "--from", dir, "--to-http", "x:8000", "--out", out}, 2, "want http(s)://host:port"},
		{"replay zero concurrency", []string{"replay", "--from", dir, "--to-grpc", "x:1", "--out", out, "--concurrency", "0"}, 2, "--concurrency"},
		{"replay missing recording", []string{"replay", "--from", filepath.Join(dir, "nope"), "--to-grpc", "x:1", "--out", out}, 1, "open recording"},
		{"replay bad nats parameter", []string{"replay", "--from", "nats://127.0.0.1:4222/S?colour=red", "--to-grpc", "x:1", "--out", out}, 1, `unknown parameter "colour"`},
		{"diff without --out", []string{"diff", "--recording", dir}, 2, "--recording and --out are required"},
		{"diff bad arms", []string{"diff", "--recording", dir, "--out", out, "--arms", "primary"}, 2, `want two names`},
		{"diff bad slice", []string{"diff", "--recording", dir, "--out", out, "--slice", "header:"}, 2, "empty slice key name"},
		{"diff same arms", []string{"diff", "--recording", dir, "--out", out, "--arms", "primary,primary"}, 1, `both sides name arm "primary"`},
		{"diff bad threshold", []string{"diff", "--recording", dir, "--out", out, "--threshold", "-1"}, 2, "threshold must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := runShadow(t.Context(), t, false, tt.args...)
			require.Equal(t, tt.code, code, stderr)
			require.Contains(t, stderr, tt.want)
		})
	}
}

func TestShadowReplayInterrupted(t *testing.T) {
	addr := startShadowModel(t)
	dir := writeShadowRecording(t, shadowRecords(50))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	out := filepath.Join(t.TempDir(), "replay")
	_, stderr, code := runShadow(ctx, t, false, "replay", "--from", dir, "--to-grpc", addr, "--out", out)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "replay interrupted; the 0 records answered before are in "+out)
	require.Contains(t, stderr, "replayed 0 records")
}

func TestParseNATSLocation(t *testing.T) {
	tests := []struct {
		spec, def string
		want      natsLocation
		wantErr   string
	}{
		{spec: "nats://127.0.0.1:4222", def: record.DefaultStream, want: natsLocation{opts: record.NATSOptions{URL: "nats://127.0.0.1:4222", Stream: "SLUICE_RECORDINGS", SubjectPrefix: "sluice.recordings"}}},
		{spec: "nats://127.0.0.1:4222/", def: replayStream, want: natsLocation{opts: record.NATSOptions{URL: "nats://127.0.0.1:4222", Stream: "SLUICE_REPLAYS", SubjectPrefix: "sluice.replays"}}},
		{spec: "NATS://u:p@h:4222/MINE?service=parcel-eta&prefix=my.recs", def: record.DefaultStream, want: natsLocation{service: "parcel-eta", opts: record.NATSOptions{URL: "nats://u:p@h:4222", Stream: "MINE", SubjectPrefix: "my.recs"}}},
		{spec: "nats:///S", wantErr: "no host"},
		{spec: "nats://h:1/a/b", wantErr: "want nats://HOST:PORT/STREAM"},
		{spec: "nats://h:1/S?x=1", wantErr: `unknown parameter "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			got, ok, err := parseNATSLocation(tt.spec, tt.def)
			require.True(t, ok)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
	_, ok, err := parseNATSLocation("recordings/", record.DefaultStream)
	require.False(t, ok)
	require.NoError(t, err)

	require.True(t, sameLocation("nats://h:1", "nats://h:1/SLUICE_RECORDINGS"))
	require.False(t, sameLocation("nats://h:1", "nats://h:1"), "the replay default stream differs from the recordings'")
	require.False(t, sameLocation("a/b", "nats://h:1/X"))
	dir := t.TempDir()
	require.True(t, sameLocation(dir, dir+"/"))
}

func TestRenderProgress(t *testing.T) {
	require.Equal(t, "[==========>         ] 500/1,000  50%  25.0/s  3 errors  ETA 20s",
		renderProgress(replay.Progress{Done: 500, Total: 1000, Errors: 3, Rate: 25}, 20))
	require.Equal(t, "[====================] 1,000/1,000 100%  25.0/s  0 errors",
		renderProgress(replay.Progress{Done: 1000, Total: 1000, Rate: 25, Final: true}, 20))
	require.Equal(t, "1,234,567 replayed  9.5/s  0 errors", renderProgress(replay.Progress{Done: 1234567, Rate: 9.5}, 20))
	require.Equal(t, "-1,000", thousands(-1000))
	require.Equal(t, "999", thousands(999))
}

// shadowNATS returns the shared NATS server's URL, skipping (failing
// under CI=true) when it is not there.
func shadowNATS(t *testing.T) string {
	t.Helper()
	url := os.Getenv("SLUICE_NATS_URL")
	if url == "" {
		url = record.DefaultNATSURL
	}
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second))
	if err == nil {
		defer nc.Close()
		var js jetstream.JetStream
		if js, err = jetstream.New(nc); err == nil {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			_, err = js.AccountInfo(ctx)
		}
	}
	if err != nil {
		t.Fatalf("nats with jetstream at %s not available: %v", url, err)
	}
	return url
}

func TestShadowReplayThroughNATS(t *testing.T) {
	url := shadowNATS(t)
	addr := startShadowModel(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	in := record.NATSOptions{URL: url, Stream: "SHADOW_IN_" + suffix, SubjectPrefix: "shadowtest.in" + suffix}
	outStream, outPrefix := "SHADOW_OUT_"+suffix, "shadowtest.out"+suffix
	t.Cleanup(func() {
		nc, err := nats.Connect(url)
		if err != nil {
			return
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, in.Stream)
		_ = js.DeleteStream(ctx, outStream)
	})

	recs := shadowRecords(40)
	other := shadowRecords(1)[0]
	other.RequestID, other.Service = "other-service", "other"
	sink, err := record.NewNATSSink(t.Context(), in, nil, nil)
	require.NoError(t, err)
	_, err = sink.Write(t.Context(), append(recs, other))
	require.NoError(t, err)
	require.NoError(t, sink.Close(t.Context()))

	from := fmt.Sprintf("%s/%s?service=parcel-eta&prefix=%s", url, in.Stream, in.SubjectPrefix)
	to := fmt.Sprintf("%s/%s?prefix=%s", url, outStream, outPrefix)
	_, stderr, code := runShadow(t.Context(), t, true, "replay", "--from", from, "--to-grpc", addr, "--rate", "0", "--out", to)
	require.Zero(t, code, stderr)
	require.Contains(t, stderr, "replayed 40 records")

	report := t.TempDir()
	stdout, stderr, code := runShadow(t.Context(), t, false, "diff", "--recording", from, "--against", to,
		"--max-p95-regression", "-1", "--out", report)
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "PASSED: A (primary) vs B (primary), 40 pairs compared")
}
