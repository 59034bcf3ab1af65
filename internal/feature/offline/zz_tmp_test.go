package offline

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-ml/sluice/internal/feature"
)

func TestZZMutate(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, []Column{{"user_id", tInt64}, {"event_timestamp", tTS}, {"score", tFloat32}, {"emb", tEmb}})
	w.Write([]feature.Value{{I64: 1}, {I64: 5}, {F64: 1}, {F32s: []float32{1, 2}}})
	w.Write([]feature.Value{{I64: 2}, {I64: 6}, {Null: true}, {Null: true}})
	w.Close()
	seed := buf.Bytes()
	dir := t.TempDir()
	specs := []colSpec{{name: "event_timestamp", typ: tTS}, {name: "user_id", typ: tInt64}, {name: "score", typ: tFloat32}, {name: "emb", typ: tEmb, optional: true}}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		data := bytes.Clone(seed)
		for range 1 + r.IntN(4) {
			data[r.IntN(len(data))] = byte(r.IntN(256))
		}
		path := filepath.Join(dir, "f.parquet")
		os.WriteFile(path, data, 0o644)
		os.WriteFile("/tmp/zz_last.bin", data, 0o644)
		s, err := openScanner(path, "f", specs)
		if err != nil {
			continue
		}
		s.scan(t.Context(), func([]feature.Value) error { return nil })
		s.close()
		_ = i
	}
}
