package accuracy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/sluice-ml/sluice/internal/objstore/objstoretest"
)

func TestReadOutcomeFile(t *testing.T) {
	dir := t.TempDir()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	type row struct {
		OrderID string    `parquet:"order_id"`
		Time    time.Time `parquet:"time,timestamp(millisecond)"`
		Actual  float64   `parquet:"actual_minutes"`
		Note    string    `parquet:"note"`
	}
	pq := filepath.Join(dir, "o.parquet")
	if err := parquet.WriteFile(pq, []row{{"o-1", at, 42.5, "x"}, {"o-2", at.Add(time.Minute), 17, "y"}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		opts ImportOptions
	}{
		{write("o.jsonl", `{"key":"o-1","values":{"actual_minutes":42.5},"time":"2026-12-01T10:00:00Z"}`+"\n\n"+`{"key":"o-2","values":{"actual_minutes":17},"time":"2026-12-01T10:01:00Z"}`+"\n"), ImportOptions{}},
		{write("o.csv", "order_id,time,actual_minutes\no-1,2026-12-01T10:00:00Z,42.5\no-2,2026-12-01T10:01:00Z,17\n"), ImportOptions{KeyColumn: "order_id"}},
		{pq, ImportOptions{KeyColumn: "order_id"}},
	} {
		check := func(t *testing.T, got []Outcome, err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 || got[0].Key != "o-1" || got[0].Values["actual_minutes"] != 42.5 || !got[0].Time.Equal(at) ||
				got[1].Key != "o-2" || got[1].Values["actual_minutes"] != 17 || !got[1].Time.Equal(at.Add(time.Minute)) || len(got[1].Values) != 1 {
				t.Fatalf("read %+v", got)
			}
		}
		t.Run(filepath.Ext(tc.path), func(t *testing.T) {
			var got []Outcome
			err := ReadOutcomeFile(tc.path, "eta", tc.opts, func(b []Outcome) error { got = append(got, b...); return nil })
			check(t, got, err)
		})
		// The same file as an object in a bucket, read in place.
		t.Run("bucket"+filepath.Ext(tc.path), func(t *testing.T) {
			srv := objstoretest.StartS3(t)
			srv.Setenv(t)
			data, err := os.ReadFile(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Open(t, "").WriteAll(t.Context(), "outcomes/"+filepath.Base(tc.path), data); err != nil {
				t.Fatal(err)
			}
			var got []Outcome
			err = ReadOutcomeObject(t.Context(), srv.URI("outcomes/"+filepath.Base(tc.path)), "eta", tc.opts,
				func(b []Outcome) error { got = append(got, b...); return nil })
			check(t, got, err)
		})
	}
	for _, tc := range []struct{ name, text, want string }{
		{"nokey.csv", "id,actual\n1,2\n", `no column "key"`},
		{"bad.csv", "key,actual\nk,soon\n", `bad.csv:2: column actual: "soon" is not a finite number`},
		{"bad.jsonl", "{\"key\":\"k\"}\n", "bad.jsonl:1: outcome.values"},
		{"x.txt", "", "want a .jsonl, .csv or .parquet file"},
	} {
		err := ReadOutcomeFile(write(tc.name, tc.text), "eta", ImportOptions{}, func([]Outcome) error { return nil })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}
