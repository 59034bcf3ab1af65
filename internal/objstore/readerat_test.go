package objstore_test

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/objstore"
	"github.com/sluice-ml/sluice/internal/objstore/objstoretest"
)

// TestReaderAt reads random ranges of an object through ranged reads and
// checks them against the content, that a small read is served from the
// block cache, and that no request asks for more than a block unless the
// read itself is larger: the object is never downloaded whole.
func TestReaderAt(t *testing.T) {
	srv := objstoretest.StartS3(t)
	b := srv.Open(t, "data")
	data := make([]byte, 3<<20+12345)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	require.NoError(t, b.WriteAll(t.Context(), "obj.bin", data))
	attrs, err := b.Attributes(t.Context(), "obj.bin")
	require.NoError(t, err)
	require.Equal(t, int64(len(data)), attrs.Size)

	const block = 64 << 10
	r := b.NewReaderAt(t.Context(), "obj.bin", attrs.Size, objstore.ReaderAtOptions{BlockSize: block, Blocks: 4})
	for range 300 {
		off := rng.Int64N(int64(len(data)))
		n := rng.IntN(3 * block)
		p := make([]byte, n)
		got, err := r.ReadAt(p, off)
		end := min(off+int64(n), int64(len(data)))
		require.Equal(t, int(end-off), got)
		if off+int64(n) > int64(len(data)) {
			require.ErrorIs(t, err, io.EOF)
		} else {
			require.NoError(t, err)
		}
		require.True(t, bytes.Equal(data[off:end], p[:got]), "range %d+%d", off, n)
	}

	// Small reads inside one cached block make one request.
	before := b.Stats()
	p := make([]byte, 100)
	for i := range 50 {
		_, err := r.ReadAt(p, 2*block+int64(i*100))
		require.NoError(t, err)
	}
	after := b.Stats()
	require.LessOrEqual(t, after.Requests-before.Requests, int64(1))
	require.LessOrEqual(t, after.BytesRead-before.BytesRead, int64(block))

	_, err = r.ReadAt(p, int64(len(data)))
	require.ErrorIs(t, err, io.EOF)

	_, err = b.Attributes(t.Context(), "missing.bin")
	require.ErrorIs(t, err, objstore.ErrNotExist)
}
