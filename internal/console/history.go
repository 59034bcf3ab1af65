package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"time"
)

// The charts' history survives a restart in a small local file
// (Sources.HistoryFile): the kept frames, written every saveEvery and when
// Run stops, read back by Run at start. It is bounded by History frames;
// frames older than the history's span are dropped on load.

// saveEvery is how often Run writes the history file.
const saveEvery = time.Minute

// maxHistoryFile bounds the file read at start: a larger one is ignored.
const maxHistoryFile = 32 << 20

// historyFile is the file's JSON form: per frame, the unix time and per
// series id the point's values in pointFields order, null for NaN.
type historyFile struct {
	Version int            `json:"version"`
	Frames  []historyFrame `json:"frames"`
}

type historyFrame struct {
	T      int64                  `json:"t"`
	Points map[string][8]*float64 `json:"p"`
}

const historyVersion = 1

func (p point) fields() [8]float64 {
	return [8]float64{p.rps, p.eps, p.e4ps, p.p50, p.p99, p.queue99, p.hits, p.miss}
}

func pointOf(v [8]*float64) point {
	get := func(i int) float64 {
		if v[i] == nil {
			return math.NaN()
		}
		return *v[i]
	}
	return point{rps: get(0), eps: get(1), e4ps: get(2), p50: get(3), p99: get(4), queue99: get(5), hits: get(6), miss: get(7)}
}

// save writes the kept frames to path atomically (a temporary file
// renamed over it).
func (s *sampler) save(path string) error {
	s.mu.Lock()
	h := historyFile{Version: historyVersion, Frames: make([]historyFrame, 0, len(s.frames))}
	for _, f := range s.frames {
		hf := historyFrame{T: f.t.Unix(), Points: make(map[string][8]*float64, len(f.points))}
		for id, p := range f.points {
			var out [8]*float64
			for i, v := range p.fields() {
				if !math.IsNaN(v) && !math.IsInf(v, 0) {
					out[i] = &v
				}
			}
			hf.Points[id] = out
		}
		h.Frames = append(h.Frames, hf)
	}
	s.mu.Unlock()
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".console-history-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}

// load puts the frames of path that are newer than now minus the
// history's span before the kept ones. A missing file is no error.
func (s *sampler) load(path string, now time.Time) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > maxHistoryFile {
		return fmt.Errorf("console history %s: %d bytes, more than %d", path, st.Size(), maxHistoryFile)
	}
	var h historyFile
	if err := json.NewDecoder(f).Decode(&h); err != nil {
		return fmt.Errorf("console history %s: %w", path, err)
	}
	if h.Version != historyVersion {
		return fmt.Errorf("console history %s: version %d, want %d", path, h.Version, historyVersion)
	}
	oldest := now.Add(-time.Duration(s.keep) * s.every)
	var frames []frame
	for _, hf := range h.Frames {
		t := time.Unix(hf.T, 0)
		if t.Before(oldest) || t.After(now) {
			continue
		}
		fr := frame{t: t, points: make(map[string]point, len(hf.Points))}
		for id, v := range hf.Points {
			fr.points[id] = pointOf(v)
		}
		frames = append(frames, fr)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frames = append(frames, s.frames...)
	if over := len(s.frames) - s.keep; over > 0 {
		s.frames = s.frames[over:]
	}
	return nil
}
