package offline

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
)

// Options tunes Historical.
type Options struct {
	// TempDir holds spill files; "" means os.TempDir(). They are removed
	// when Historical returns.
	TempDir string
	// MemoryBudget is roughly how many bytes of rows one join partition
	// may hold; the inputs are split into enough partitions to respect it.
	// 0 means 256 MiB.
	MemoryBudget int64
	// Logger receives progress; nil discards.
	Logger *slog.Logger

	partitions int // tests: force this many partitions per view
}

const (
	defaultMemoryBudget = 256 << 20
	maxPartitions       = 256
	// inflation estimates decoded row bytes per byte of input file.
	inflation = 4
)

// viewPlan is what the join needs to know about one requested view.
type viewPlan struct {
	view     *feature.View
	src      *feature.Source
	keys     []string
	kinds    []feature.Kind
	fields   []feature.Field // the requested features, in request order
	pick     []int           // their positions in view.Schema
	outNames []string        // output column names
	keyCols  []int           // entity column of each join key
	parts    int
}

// historical runs a point-in-time join of the entity rows in entities with
// the plans' views, writing the result to out.
func historical(ctx context.Context, dir string, plans []*viewPlan, entities, out string, opts Options) (err error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	budget := opts.MemoryBudget
	if budget <= 0 {
		budget = defaultMemoryBudget
	}
	keyKinds, err := joinKeyKinds(plans)
	if err != nil {
		return err
	}
	er, err := openEntities(entities, keyKinds)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, er.done()) }()
	if er.ts < 0 {
		return fmt.Errorf("entity rows %s: no column '%s'", entities, EntityTimestampColumn)
	}
	if err := assignOutputNames(plans, er.cols); err != nil {
		return err
	}
	planPartitions(ctx, dir, plans, er, opts.partitions, budget)

	tmp, err := os.MkdirTemp(opts.TempDir, "sluice-historical-")
	if err != nil {
		return fmt.Errorf("create spill folder: %w", err)
	}
	defer func() { err = errors.Join(err, os.RemoveAll(tmp)) }()
	sp := &spill{dir: tmp, seed: maphash.MakeSeed()}
	defer sp.closeAll()

	// Pass 1: spill the entity rows, and each view's (row, key, ts) into
	// its partitions.
	started := time.Now()
	ent, err := sp.create("entities")
	if err != nil {
		return err
	}
	entParts := make([][]*spillFile, len(plans))
	for v, p := range plans {
		for i := range p.parts {
			f, err := sp.create(fmt.Sprintf("v%d-e%d", v, i))
			if err != nil {
				return err
			}
			entParts[v] = append(entParts[v], f)
		}
	}
	entSchema := make([]feature.Field, len(er.cols))
	for i, c := range er.cols {
		entSchema[i] = feature.Field{Name: c.Name, Type: c.Type}
	}
	var (
		nrows        int64
		minTS, maxTS int64 = math.MaxInt64, math.MinInt64
		buf, key     []byte
		keyVals      []feature.Value
	)
	err = er.each(ctx, func(vals []feature.Value) error {
		ts := vals[er.ts]
		if ts.Null {
			return fmt.Errorf("entity rows %s: row %d: %s is null", entities, nrows+1, EntityTimestampColumn)
		}
		minTS, maxTS = min(minTS, ts.I64), max(maxTS, ts.I64)
		var err error
		buf, err = feature.AppendValues(buf[:0], entSchema, vals)
		if err != nil {
			return fmt.Errorf("entity rows %s: row %d: %w", entities, nrows+1, err)
		}
		ent.record(buf)
		for v, p := range plans {
			keyVals = keyVals[:0]
			for _, c := range p.keyCols {
				keyVals = append(keyVals, vals[c])
			}
			key, err = feature.AppendEntityKey(key[:0], p.kinds, keyVals)
			if err != nil {
				continue // a null key matches nothing
			}
			f := entParts[v][sp.part(key, p.parts)]
			f.uvarint(uint64(nrows))
			f.varint(ts.I64)
			f.record(key)
		}
		nrows++
		return nil
	})
	if err != nil {
		return err
	}
	logger.Debug("entity rows spilled", "rows", nrows, "duration", time.Since(started))

	// Per view: spill the source rows into partitions, join each partition
	// and record each entity row's result by row index.
	results := make([]*resultFile, len(plans))
	for v, p := range plans {
		res, err := joinView(ctx, dir, sp, p, v, entParts[v], nrows, minTS, maxTS)
		if err != nil {
			return err
		}
		results[v] = res
		logger.Debug("view joined", "view", p.view.Name, "partitions", p.parts, "duration", time.Since(started))
	}

	// Pass 2: write the output in input order.
	return writeOutput(ctx, out, er.cols, entSchema, ent, plans, results, nrows)
}

// joinKeyKinds collects the kind of each join key over all views; a key
// must have the same kind in every view (int32 and int64 count as one).
func joinKeyKinds(plans []*viewPlan) (map[string]feature.Kind, error) {
	keyKinds := map[string]feature.Kind{}
	for _, p := range plans {
		for i, k := range p.keys {
			if old, ok := keyKinds[k]; ok && !sameKeyKind(old, p.kinds[i]) {
				return nil, fmt.Errorf("join key '%s' is %s in one view and %s in another", k, old, p.kinds[i])
			}
			keyKinds[k] = p.kinds[i]
		}
	}
	return keyKinds, nil
}

// planPartitions finds each view's key columns among the entity columns
// and picks its partition count: partitions when positive, else enough
// partitions that one fits the memory budget.
func planPartitions(ctx context.Context, dir string, plans []*viewPlan, er *entityReader, partitions int, budget int64) {
	for _, p := range plans {
		p.keyCols = make([]int, len(p.keys))
		for i, k := range p.keys {
			p.keyCols[i] = slices.IndexFunc(er.cols, func(c Column) bool { return c.Name == k })
		}
		p.parts = partitions
		if p.parts <= 0 {
			est := inflation * (er.size + sourceSize(ctx, dir, p.src))
			p.parts = int(min(max(1, (est+budget-1)/budget), maxPartitions))
		}
	}
}

func sameKeyKind(a, b feature.Kind) bool {
	isInt := func(k feature.Kind) bool { return k == feature.KindInt32 || k == feature.KindInt64 }
	return a == b || (isInt(a) && isInt(b))
}

// assignOutputNames names each feature's output column: the feature name,
// or view__feature when the name is not unique.
func assignOutputNames(plans []*viewPlan, cols []Column) error {
	count := map[string]int{}
	for _, c := range cols {
		count[c.Name]++
	}
	for _, p := range plans {
		for _, f := range p.fields {
			count[f.Name]++
		}
	}
	seen := map[string]bool{}
	for _, c := range cols {
		seen[c.Name] = true
	}
	for _, p := range plans {
		p.outNames = make([]string, len(p.fields))
		for i, f := range p.fields {
			n := f.Name
			if count[n] > 1 {
				n = p.view.Name + "__" + f.Name
			}
			if seen[n] {
				return fmt.Errorf("feature '%s:%s' is requested twice or clashes with entity column '%s'", p.view.Name, f.Name, n)
			}
			seen[n] = true
			p.outNames[i] = n
		}
	}
	return nil
}

// sourceSize is the total size of a source's files (0 when unknown).
func sourceSize(ctx context.Context, dir string, src *feature.Source) int64 {
	files, release, err := sourceData(ctx, dir, src)
	if err != nil {
		return 0
	}
	defer release()
	var n int64
	for _, f := range files {
		if f.bucket != nil {
			n += f.size
		} else if st, err := os.Stat(f.path); err == nil {
			n += st.Size()
		}
	}
	return n
}

type entRef struct {
	key string
	ts  int64
	idx int64
}

type featRow struct {
	key     string
	ev, cr  int64
	seq     int
	payload []byte
}

func joinView(ctx context.Context, dir string, sp *spill, p *viewPlan, v int, entParts []*spillFile,
	nrows, minTS, maxTS int64,
) (*resultFile, error) {
	featParts := make([]*spillFile, p.parts)
	for i := range p.parts {
		f, err := sp.create(fmt.Sprintf("v%d-f%d", v, i))
		if err != nil {
			return nil, err
		}
		featParts[i] = f
	}
	if nrows > 0 {
		if err := spillViewRows(ctx, dir, sp, p, featParts, minTS, maxTS); err != nil {
			return nil, err
		}
	}
	res, err := newResultFile(sp, fmt.Sprintf("v%d-r", v), nrows)
	if err != nil {
		return nil, err
	}
	ttl := p.view.TTL.Nanoseconds()
	for i := range p.parts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ents, err := readEntRefs(entParts[i])
		if err != nil {
			return nil, err
		}
		feats, err := readFeatRows(featParts[i])
		if err != nil {
			return nil, err
		}
		slices.SortFunc(ents, func(a, b entRef) int {
			return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.ts, b.ts))
		})
		slices.SortFunc(feats, func(a, b featRow) int {
			return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.ev, b.ev), cmp.Compare(a.cr, b.cr), cmp.Compare(a.seq, b.seq))
		})
		if err := sweep(ents, feats, ttl, res); err != nil {
			return nil, err
		}
		featParts[i].remove()
		entParts[i].remove()
	}
	return res, nil
}

// spillViewRows reads the view's source rows in the time window the entity
// rows can reach (from the earliest entity ts less the view's TTL to the
// latest) and spills each row's key, timestamps and selected features
// into its key's partition.
func spillViewRows(ctx context.Context, dir string, sp *spill, p *viewPlan, featParts []*spillFile, minTS, maxTS int64) error {
	start := int64(math.MinInt64)
	if ttl := p.view.TTL.Nanoseconds(); ttl > 0 && minTS > math.MinInt64+ttl {
		start = minTS - ttl
	}
	var key, payload []byte
	sel := make([]feature.Value, len(p.fields))
	return scanSource(ctx, dir, p.src, p.keys, p.kinds, p.view.Schema, start, maxTS, func(r Row) error {
		var (
			ok  bool
			err error
		)
		if key, ok = appendKey(key[:0], p.kinds, r.Keys); !ok {
			return nil // rows without a key cannot match
		}
		for i, j := range p.pick {
			sel[i] = r.Values[j]
		}
		payload, err = feature.AppendValues(payload[:0], p.fields, sel)
		if err != nil {
			return fmt.Errorf("view '%s': %w", p.view.Name, err)
		}
		f := featParts[sp.part(key, p.parts)]
		f.record(key)
		f.varint(r.EventTS)
		f.varint(r.CreatedTS)
		f.record(payload)
		return nil
	})
}

// sweep joins one partition: ents sorted by key then ts, feats by key,
// event ts, created ts and read order. It records in res each entity
// row's latest feature row within the view's TTL.
func sweep(ents []entRef, feats []featRow, ttl int64, res *resultFile) error {
	// For each entity row (by key, then ts), the last feature row
	// of the same key with ev <= ts is the latest, ties won by the
	// largest created ts (then the row read last).
	j := 0
	for e := range ents {
		er := &ents[e]
		for j < len(feats) && feats[j].key < er.key {
			j++
		}
		for j < len(feats) && feats[j].key == er.key && feats[j].ev <= er.ts {
			j++
		}
		if j == 0 {
			continue
		}
		best := &feats[j-1]
		if best.key != er.key || best.ev > er.ts {
			continue
		}
		if ttl > 0 && best.ev < er.ts-ttl {
			continue
		}
		if err := res.set(er.idx, best.payload); err != nil {
			return err
		}
	}
	return nil
}

func readEntRefs(f *spillFile) ([]entRef, error) {
	r, err := f.reader()
	if err != nil {
		return nil, err
	}
	var out []entRef
	for {
		idx, err := binary.ReadUvarint(r)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read spill file: %w", err)
		}
		ts, err := binary.ReadVarint(r)
		if err != nil {
			return nil, fmt.Errorf("read spill file: %w", err)
		}
		key, err := readRecord(r)
		if err != nil {
			return nil, err
		}
		out = append(out, entRef{key: string(key), ts: ts, idx: int64(idx)})
	}
}

func readFeatRows(f *spillFile) ([]featRow, error) {
	r, err := f.reader()
	if err != nil {
		return nil, err
	}
	var out []featRow
	for seq := 0; ; seq++ {
		key, err := readRecord(r)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		ev, err1 := binary.ReadVarint(r)
		cr, err2 := binary.ReadVarint(r)
		payload, err3 := readRecord(r)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("read spill file: %w", err)
		}
		out = append(out, featRow{key: string(key), ev: ev, cr: cr, seq: seq, payload: payload})
	}
}

// readRecord reads a uvarint-length prefixed record; io.EOF only before
// its first byte.
func readRecord(r *bufio.Reader) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("read spill file: %w", err)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("read spill file: %w", io.ErrUnexpectedEOF)
	}
	return b, nil
}

func writeOutput(ctx context.Context, out string, cols []Column, entSchema []feature.Field, ent *spillFile,
	plans []*viewPlan, results []*resultFile, nrows int64,
) (err error) {
	outCols := slices.Clone(cols)
	for _, p := range plans {
		for i, f := range p.fields {
			outCols = append(outCols, Column{Name: p.outNames[i], Type: f.Type})
		}
	}
	tmpOut, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create output: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmpOut.Close() // best effort: err is already being returned
			_ = os.Remove(tmpOut.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmpOut, 1<<20)
	w, err := NewWriter(bw, outCols)
	if err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	r, err := ent.reader()
	if err != nil {
		return err
	}
	readers := make([]*resultReader, len(results))
	for i, res := range results {
		if readers[i], err = res.reader(); err != nil {
			return err
		}
	}
	row := make([]feature.Value, 0, len(outCols))
	var vals, fvals []feature.Value
	for i := range nrows {
		if i&4095 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		rec, err := readRecord(r)
		if err != nil {
			return fmt.Errorf("read spill file: %w", err)
		}
		vals, err = feature.DecodeValues(rec, entSchema, vals)
		if err != nil {
			return fmt.Errorf("read spill file: %w", err)
		}
		row = append(row[:0], vals...)
		for v, p := range plans {
			payload, ok, err := readers[v].next()
			if err != nil {
				return err
			}
			if !ok {
				for range p.fields {
					row = append(row, feature.Value{Null: true})
				}
				continue
			}
			fvals, err = feature.DecodeValues(payload, p.fields, fvals)
			if err != nil {
				return fmt.Errorf("read spill file: %w", err)
			}
			row = append(row, fvals...)
		}
		if err := w.Write(row); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if err := tmpOut.Close(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	//nolint:gosec // G302: the output is a dataset for the operator's training jobs and gets the usual 0644 of a created file; 0600 is only CreateTemp's default
	if err := os.Chmod(tmpOut.Name(), 0o644); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if err := os.Rename(tmpOut.Name(), out); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// appendKey appends the storage key of one row's join keys to dst. ok is
// false when the row has no usable key (a null key value, or any key
// AppendEntityKey rejects), which matches no entity row.
func appendKey(dst []byte, kinds []feature.Kind, vals []feature.Value) (key []byte, ok bool) {
	key, err := feature.AppendEntityKey(dst, kinds, vals)
	return key, err == nil
}
