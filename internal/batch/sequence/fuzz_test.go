package sequence

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/batch"
	"github.com/sluice-ml/sluice/internal/infer"
)

// FuzzSequenceFlags drives the scheduler with arbitrary runs of
// correlation ids, START/END flags and values from clients, one request at
// a time, and checks every answer against a plain model of Triton's
// sequence semantics: a sequence must start with START, START resets the
// sum, END frees the id, and each answer is its sequence's running sum.
func FuzzSequenceFlags(f *testing.F) {
	f.Add([]byte{0x01, 5, 0x00, 6, 0x02, 7, 0x11, 1, 0x03, 9})
	f.Add([]byte{0x00, 1, 0x21, 2, 0x20, 3, 0x22, 4, 0x01, 5, 0x02, 6})
	f.Add([]byte{0x41, 1, 0x42, 2, 0x40, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 200 {
			ops = ops[:200]
		}
		for _, strategy := range []Strategy{Direct, Oldest} {
			o := accOptions(strategy, 4, infer.Invalid) // 4 slots for at most 4 ids: nothing waits
			o.IdleTimeout = time.Hour
			s, err := New(o, []batch.Executor{&accExec{}}, nil, NewMetrics(prometheus.NewRegistry()), nil)
			require.NoError(t, err)
			active := map[uint64]bool{}
			sums := map[uint64]int32{}
			for i := 0; i+1 < len(ops); i += 2 {
				id := uint64(ops[i]>>4&3) + 1
				start, end := ops[i]&1 != 0, ops[i]&2 != 0
				v := int32(int8(ops[i+1]))
				res, err := s.Submit(context.Background(), req(num(id), v, start, end))
				if !active[id] && !start {
					require.Equal(t, ReasonSequenceNotStarted, reason(t, err), "op %d", i/2)
					continue
				}
				require.NoError(t, err, "op %d", i/2)
				if start {
					sums[id] = v
				} else {
					sums[id] += v
				}
				active[id] = !end
				got := int32(binary.LittleEndian.Uint32(res.Outputs[0].Data))
				require.Equal(t, sums[id], got, "op %d: sequence %d", i/2, id)
			}
			require.NoError(t, s.Close(context.Background()))
		}
	})
}
