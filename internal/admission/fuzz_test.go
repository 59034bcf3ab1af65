package admission

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluice-ml/sluice/internal/admission/limitspec"
)

// chunkReader returns data n bytes at a time, as a chunked body arrives.
type chunkReader struct {
	data []byte
	n    int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), r.n, len(r.data))
	copy(p, r.data[:k])
	r.data = r.data[k:]
	return k, nil
}

// FuzzBody reads a client's body through the wrapper Handler puts around
// bodies of unknown length, in chunks of any size, and checks the
// accounting: a body is delivered whole or refused for the right reason,
// the budget is never passed, and everything is released at the end.
func FuzzBody(f *testing.F) {
	f.Add([]byte("hello"), uint16(0), uint16(0), uint8(0))
	f.Add(bytes.Repeat([]byte("x"), 300), uint16(100), uint16(1000), uint8(7))
	f.Add(bytes.Repeat([]byte("y"), 300), uint16(1000), uint16(100), uint8(63))
	f.Add([]byte{}, uint16(1), uint16(1), uint8(255))
	f.Fuzz(func(t *testing.T, data []byte, limit, budget uint16, chunk uint8) {
		b := NewBudget(int64(budget), nil)
		a := &account{b: b, rej: NewMetrics(nil).forListener("fuzz")}
		rc := io.NopCloser(&chunkReader{data: data, n: int(chunk) + 1})
		if limit > 0 {
			rc = http.MaxBytesReader(httptest.NewRecorder(), rc, int64(limit))
		}
		bd := &body{rc: rc, acct: a, limit: int64(limit)}
		got, err := io.ReadAll(bd)
		if budget > 0 && b.InUse() > int64(budget) {
			t.Fatalf("in use %d > budget %d", b.InUse(), budget)
		}
		switch {
		case err == nil:
			if !bytes.Equal(got, data) {
				t.Fatalf("read %d bytes, sent %d", len(got), len(data))
			}
			if b.InUse() != int64(len(data)) {
				t.Fatalf("charged %d, read %d", b.InUse(), len(data))
			}
		case errors.Is(err, ErrBodyTooLarge):
			if limit == 0 || len(data) <= int(limit) {
				t.Fatalf("body of %d refused as too large for limit %d", len(data), limit)
			}
		case errors.Is(err, ErrOverloaded):
			// A body of unknown length may not take the reserve kept for
			// small requests (the budget's last eighth).
			if room := limitspec.BulkBytes(int64(budget)); budget == 0 || int64(len(data)) <= room {
				t.Fatalf("body of %d refused as overloaded for budget %d (room for bodies of unknown length %d)", len(data), budget, room)
			}
		default:
			t.Fatalf("unexpected error %v", err)
		}
		a.close()
		if b.InUse() != 0 {
			t.Fatalf("in use %d after the request", b.InUse())
		}
	})
}
