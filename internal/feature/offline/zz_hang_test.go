package offline

import (
	"context"
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/stretchr/testify/require"
)

var t0ctx = context.Background()

func runOne(dir string, data []byte) (err error, dur time.Duration, hung bool) {
	path := filepath.Join(dir, "f.parquet")
	os.WriteFile(path, data, 0o644)
	specs := []colSpec{{name: "event_timestamp", typ: tTS}, {name: "user_id", typ: tInt64}, {name: "score", typ: tFloat32}, {name: "emb", typ: tEmb, optional: true}}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("PANIC escaped: %v", r)
			}
		}()
		s, err := openScanner(path, "f.parquet", specs)
		if err != nil {
			done <- err
			return
		}
		defer s.close()
		n := 0
		done <- s.scan(t0ctx, func([]feature.Value) error {
			n++
			if n > 1<<16 {
				return os.ErrInvalid
			}
			return nil
		})
	}()
	select {
	case err := <-done:
		return err, time.Since(start), false
	case <-time.After(time.Second):
		return nil, time.Since(start), true
	}
}

func TestZZHang(t *testing.T) {
	if os.Getenv("PQHANG") == "" {
		t.Skip()
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, []Column{{"user_id", tInt64}, {"event_timestamp", tTS}, {"score", tFloat32}, {"emb", tEmb}})
	require.NoError(t, err)
	require.NoError(t, w.Write([]feature.Value{{I64: 1}, {I64: 5}, {F64: 1}, {F32s: []float32{1, 2}}}))
	require.NoError(t, w.Write([]feature.Value{{I64: 2}, {I64: 6}, {Null: true}, {Null: true}}))
	require.NoError(t, w.Close())
	seed := buf.Bytes()
	t0ctx = t.Context()
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	found := 0
	for it := 0; it < 20000 && found < 5; it++ {
		d := append([]byte(nil), seed...)
		nm := 1 + r.IntN(3)
		for range nm {
			i := r.IntN(len(d))
			switch r.IntN(5) {
			case 0:
				d[i] ^= byte(1 << r.IntN(8))
			case 1:
				d[i] = byte(r.IntN(256))
			case 2:
				if i+4 <= len(d) {
					binary.LittleEndian.PutUint32(d[i:], r.Uint32())
				}
			case 3:
				d[i] = []byte{0, 0x7f, 0xff, 0x80, 0x01, 0x15, 0x16, 0x19, 0x1c}[r.IntN(9)]
			case 4:
				if i+4 <= len(d) {
					binary.LittleEndian.PutUint32(d[i:], []uint32{0x7fffffff, 0xffffffff, 0x80000000, 1 << 20}[r.IntN(4)])
				}
			}
		}
		err, dur, hung := runOne(dir, d)
		if hung || dur > 500*time.Millisecond || (err != nil && bytes.Contains([]byte(err.Error()), []byte("PANIC"))) {
			found++
			name := fmt.Sprintf("/tmp/pqhang/out/in%d_%d", it, found)
			os.WriteFile(name, d, 0o644)
			t.Logf("it %d: hung=%v dur=%v err=%v -> %s", it, hung, dur, err, name)
			if hung {
				b := make([]byte, 1<<20)
				n := runtime.Stack(b, true)
				os.WriteFile(name+".stack", b[:n], 0o644)
				// dir reuse is unsafe: new dir
				dir = t.TempDir()
			}
		}
	}
}
