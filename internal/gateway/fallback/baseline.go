package fallback

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// SnapshotSchema is the version of a baseline snapshot's format.
const SnapshotSchema = 1

// Limits on a snapshot read from a file or the fleet's store.
const (
	// MaxSnapshotBuckets bounds the buckets of a snapshot: 30 days of
	// hourly buckets.
	MaxSnapshotBuckets = 30 * 24
	maxSnapshotBytes   = 1 << 20
)

// Snapshot is a baseline's completed buckets, what a Monitor persists so
// that a restarted (or new) replica has a baseline from its first minute.
// Buckets are numbered from Origin in steps of BucketNS.
type Snapshot struct {
	Schema   int              `json:"schema"`
	Origin   time.Time        `json:"origin"`
	BucketNS int64            `json:"bucket_ns"`
	Buckets  []SnapshotBucket `json:"buckets"`
}

// SnapshotBucket is one completed bucket's Welford statistics: of the
// predictions (N, Mean, M2) and of the per-window P90s (P90N, P90Mean,
// P90M2).
type SnapshotBucket struct {
	Index   int64   `json:"i"`
	N       float64 `json:"n"`
	Mean    float64 `json:"mean"`
	M2      float64 `json:"m2"`
	P90N    float64 `json:"p90_n,omitempty"`
	P90Mean float64 `json:"p90_mean,omitempty"`
	P90M2   float64 `json:"p90_m2,omitempty"`
}

func (b *SnapshotBucket) stats() hourBucket {
	return hourBucket{hour: b.Index, values: welford{n: b.N, mean: b.Mean, m2: b.M2}, p90s: welford{n: b.P90N, mean: b.P90Mean, m2: b.P90M2}}
}

func snapOf(h *hourBucket) SnapshotBucket {
	return SnapshotBucket{
		Index: h.hour, N: h.values.n, Mean: h.values.mean, M2: h.values.m2,
		P90N: h.p90s.n, P90Mean: h.p90s.mean, P90M2: h.p90s.m2,
	}
}

// ParseSnapshot decodes and checks a snapshot.
func ParseSnapshot(data []byte) (*Snapshot, error) {
	if len(data) > maxSnapshotBytes {
		return nil, fmt.Errorf("baseline snapshot is %d bytes, more than %d", len(data), maxSnapshotBytes)
	}
	var s Snapshot
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("decode baseline snapshot: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("decode baseline snapshot: trailing data")
	}
	switch {
	case s.Schema != SnapshotSchema:
		return nil, fmt.Errorf("unsupported baseline snapshot schema %d", s.Schema)
	case s.BucketNS <= 0:
		return nil, errors.New("baseline snapshot: bucket_ns must be positive")
	case len(s.Buckets) > MaxSnapshotBuckets:
		return nil, fmt.Errorf("baseline snapshot has %d buckets, more than %d", len(s.Buckets), MaxSnapshotBuckets)
	case s.Origin.IsZero():
		return nil, errors.New("baseline snapshot: origin is missing")
	}
	for i, b := range s.Buckets {
		ok := b.N >= 0 && b.P90N >= 0 && b.M2 >= 0 && b.P90M2 >= 0 && b.Index >= 0 && b.Index < math.MaxInt32
		for _, v := range []float64{b.N, b.Mean, b.M2, b.P90N, b.P90Mean, b.P90M2} {
			ok = ok && !math.IsNaN(v) && !math.IsInf(v, 0)
		}
		if !ok {
			return nil, fmt.Errorf("baseline snapshot: bucket %d has a negative or non-finite value", i)
		}
		if i > 0 && b.Index <= s.Buckets[i-1].Index {
			return nil, fmt.Errorf("baseline snapshot: bucket %d is out of order", i)
		}
	}
	return &s, nil
}

// Marshal encodes s.
func (s *Snapshot) Marshal() ([]byte, error) {
	s.Schema = SnapshotSchema
	return json.Marshal(s)
}

// Merge adds the buckets of o (at most the keep most recent of the result
// are kept) to s: o's buckets are moved to s's numbering by their start
// time, so snapshots of replicas that started at different times merge
// into the nearest bucket. A snapshot with another bucket width replaces
// nothing and is ignored (false).
func (s *Snapshot) Merge(o *Snapshot, keep int) bool {
	if s.BucketNS == 0 {
		*s = Snapshot{Schema: SnapshotSchema, Origin: o.Origin, BucketNS: o.BucketNS}
	}
	if o.BucketNS != s.BucketNS {
		return false
	}
	idx := map[int64]int{}
	for i, b := range s.Buckets {
		idx[b.Index] = i
	}
	width := time.Duration(s.BucketNS)
	for _, b := range o.Buckets {
		start := o.Origin.Add(time.Duration(b.Index) * width)
		k := int64(math.Round(float64(start.Sub(s.Origin)) / float64(width)))
		if k < 0 {
			continue
		}
		ob := b.stats()
		if i, ok := idx[k]; ok {
			cur := s.Buckets[i].stats()
			cur.values.merge(ob.values)
			cur.p90s.merge(ob.p90s)
			s.Buckets[i] = snapOf(&cur)
			s.Buckets[i].Index = k
			continue
		}
		ob.hour = k
		idx[k] = len(s.Buckets)
		s.Buckets = append(s.Buckets, snapOf(&ob))
	}
	sortBuckets(s.Buckets)
	if keep > 0 && len(s.Buckets) > keep {
		s.Buckets = append([]SnapshotBucket(nil), s.Buckets[len(s.Buckets)-keep:]...)
	}
	return true
}

func sortBuckets(bs []SnapshotBucket) {
	for i := 1; i < len(bs); i++ {
		for j := i; j > 0 && bs[j].Index < bs[j-1].Index; j-- {
			bs[j], bs[j-1] = bs[j-1], bs[j]
		}
	}
}

// Completed returns the monitor's completed buckets (those observed here
// only, when liveOnly: not the ones it was seeded with) and the count of
// completions so far, which moves each time a bucket completes.
func (m *Monitor) Completed(liveOnly bool) (Snapshot, uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Snapshot{Schema: SnapshotSchema, Origin: m.start, BucketNS: int64(m.opts.Bucket)}
	if len(m.buckets) < 2 {
		return s, m.completed
	}
	for i := range m.buckets[:len(m.buckets)-1] {
		b := &m.buckets[i]
		if liveOnly && b.hour < m.liveFrom {
			continue
		}
		s.Buckets = append(s.Buckets, snapOf(b))
	}
	return s, m.completed
}

// Seed loads a snapshot's buckets before the monitor observes anything:
// those that completed before now (the monitor's clock) and fall within
// History make the baseline at once. The monitor's buckets then count
// from the snapshot's origin, so that its own completed buckets merge
// with the fleet's. A snapshot of another bucket width is ignored (false).
func (m *Monitor) Seed(s *Snapshot) bool {
	if s == nil || s.BucketNS != int64(m.opts.Bucket) {
		return false
	}
	now := m.opts.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.start.IsZero() {
		return false
	}
	m.start = s.Origin
	cur := int64(now.Sub(m.start) / m.opts.Bucket)
	if now.Before(m.start) {
		cur = 0
	}
	m.liveFrom = cur
	m.buckets = m.buckets[:0]
	for _, b := range s.Buckets {
		if b.Index < cur && b.Index >= cur-m.hours {
			m.buckets = append(m.buckets, b.stats())
		}
	}
	m.buckets = append(m.buckets, hourBucket{hour: cur})
	m.recomputeBaseline()
	m.publish()
	return m.baseline.Hours > 0
}
