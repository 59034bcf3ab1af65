package embedded

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/online/onlinetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var _ online.Store = (*Store)(nil)

func TestConformance(t *testing.T) {
	onlinetest.Run(t, func(t *testing.T) online.Store {
		t.Helper()
		s, err := Open(filepath.Join(t.TempDir(), "data", "online.db"), Options{NoSync: true})
		require.NoError(t, err)
		return s
	})
}

func TestLockedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "online.db")
	s, err := Open(path, Options{})
	require.NoError(t, err)
	start := time.Now()
	_, err = Open(path, Options{LockTimeout: 100 * time.Millisecond})
	require.ErrorIs(t, err, ErrLocked)
	require.ErrorContains(t, err, path)
	require.Less(t, time.Since(start), 5*time.Second)
	require.NoError(t, s.Close())
	s2, err := Open(path, Options{LockTimeout: 100 * time.Millisecond})
	require.NoError(t, err, "the lock is released on Close")
	require.NoError(t, s2.Close())
}

func TestReopenKeepsData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "online.db")
	s, err := Open(path, Options{})
	require.NoError(t, err)
	k := online.Key{View: "v", Entity: onlinetest.Ent(3)}
	_, err = s.Write(t.Context(), []online.Entry{{Key: k, Record: feature.Record{EventTS: 5, Payload: []byte("p")}}}, online.WriteOptions{})
	require.NoError(t, err)
	require.NoError(t, s.PutMeta(t.Context(), "m", []byte("meta")))
	require.NoError(t, s.Close())

	s, err = Open(path, Options{})
	require.NoError(t, err)
	defer s.Close()
	rs, err := s.Read(context.Background(), []online.Key{k})
	require.NoError(t, err)
	require.True(t, rs[0].Found)
	require.Equal(t, "p", string(rs[0].Record.Payload))
	m, err := s.GetMeta(t.Context(), "m")
	require.NoError(t, err)
	require.Equal(t, "meta", string(m))
}

func TestLegacyRows(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "online.db"), Options{NoSync: true})
	require.NoError(t, err)
	defer s.Close()
	onlinetest.RunLegacyRows(t, s, func(t *testing.T, view string, entity, raw []byte) {
		t.Helper()
		require.NoError(t, s.db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(viewBucket(view))
			if err != nil {
				return err
			}
			return b.Put(append([]byte{keyMark}, entity...), raw)
		}))
	})
}

// CountRows counts a view's entities, each once however often written.
func TestCountRows(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "online.db"), Options{})
	require.NoError(t, err)
	defer s.Close()
	n, err := s.CountRows(t.Context(), "v")
	require.NoError(t, err)
	require.Zero(t, n, "a view never written")
	var es []online.Entry
	for i := range 30 {
		es = append(es, online.Entry{Key: online.Key{View: "v", Entity: onlinetest.Ent(int64(i % 20))}, Record: feature.Record{EventTS: int64(i), Payload: []byte("p")}})
	}
	es = append(es, online.Entry{Key: online.Key{View: "w", Entity: onlinetest.Ent(1)}, Record: feature.Record{EventTS: 1, Payload: []byte("p")}})
	_, err = s.Write(t.Context(), es, online.WriteOptions{})
	require.NoError(t, err)
	n, err = s.CountRows(t.Context(), "v")
	require.NoError(t, err)
	require.Equal(t, int64(20), n)
	require.NoError(t, s.DeleteView(t.Context(), "v"))
	n, err = s.CountRows(t.Context(), "v")
	require.NoError(t, err)
	require.Zero(t, n)
}
