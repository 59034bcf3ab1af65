package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRecordingSpoolDefaults(t *testing.T) {
	cfg, err := Load("testdata/minimal.good.yaml")
	require.NoError(t, err)
	rc := cfg.Gateway.Recording
	require.Equal(t, filepath.Join("testdata", "recordings", "spool"), rc.Spool.Dir, "under the recordings dir, relative to the config file")
	require.Equal(t, int64(1<<30), rc.Spool.MaxBytes)
	require.Equal(t, "drop_newest", rc.Spool.Full)
	require.Equal(t, 5*time.Second, rc.CloseTimeout.Std())
}

func TestRecordingSpoolSettings(t *testing.T) {
	minimal, err := os.ReadFile("testdata/minimal.good.yaml")
	require.NoError(t, err)
	for _, tt := range []struct {
		name    string
		yaml    string
		wantErr []string
	}{
		{name: "set", yaml: "{sink: nats, spool: {dir: /var/lib/sluice/spool, max_bytes: 65536, full: block}, close_timeout: 3s}"},
		{name: "relative dir", yaml: "{spool: {dir: spool-a}}"},
		{name: "bad", yaml: "{spool: {max_bytes: 100, full: drop_oldest}, close_timeout: -1s}", wantErr: []string{
			"gateway.recording.spool.max_bytes: must be at least 16384",
			`gateway.recording.spool.full: "drop_oldest" is not one of drop_newest, block`,
			"gateway.recording.close_timeout: must be positive",
		}},
		{name: "archive", yaml: "{archive: {location: 's3://127.0.0.1:9000/recordings/gw-1'}}"},
		{name: "archive with interval", yaml: "{archive: {location: 'gs://bucket/rec', interval: 5m}}"},
		{name: "bad archive", yaml: "{sink: nats, archive: {location: 'https://key:secret@host/bucket', interval: 10ms}}", wantErr: []string{
			"gateway.recording.archive.location: want s3://, gs:// or as://",
			`gateway.recording.archive: archives sink jsonl's files; the sink is "nats"`,
			"gateway.recording.archive.interval: must be at least 1s",
		}},
		{name: "archive credentials", yaml: "{archive: {location: 's3://AKIA:secret@bucket/rec'}}", wantErr: []string{
			"gateway.recording.archive.location: '@', '?', '#' and '\\' are not allowed",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "sluice.yaml")
			doc := strings.Replace(string(minimal), "gateway:\n", "gateway:\n  recording: "+tt.yaml+"\n", 1)
			require.NoError(t, os.WriteFile(path, []byte(doc), 0o600))
			cfg, err := Load(path)
			if len(tt.wantErr) > 0 {
				for _, want := range tt.wantErr {
					require.ErrorContains(t, err, want)
				}
				require.NotContains(t, err.Error(), "secret", "a credential in a location is not repeated")
				return
			}
			require.NoError(t, err)
			rc := cfg.Gateway.Recording
			switch tt.name {
			case "set":
				require.Equal(t, RecordingSpool{Dir: "/var/lib/sluice/spool", MaxBytes: 65536, Full: "block"}, rc.Spool)
				require.Equal(t, 3*time.Second, rc.CloseTimeout.Std())
			case "relative dir":
				require.Equal(t, filepath.Join(dir, "spool-a"), rc.Spool.Dir)
			case "archive":
				require.Equal(t, "s3://127.0.0.1:9000/recordings/gw-1", rc.Archive.Location)
				require.Equal(t, 30*time.Second, rc.Archive.Interval.Std())
			case "archive with interval":
				require.Equal(t, 5*time.Minute, rc.Archive.Interval.Std())
			}
		})
	}
}
