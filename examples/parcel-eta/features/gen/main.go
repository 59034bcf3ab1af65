// Command gen writes synthetic Parquet data for the parcel_eta feature
// repository: user_stats.parquet, user_embedding.parquet,
// package_features.parquet and route_features/part-00000.parquet (the
// route source is a folder, so offline pushes can add files), each with the join
// key, event_timestamp, created and the features, and
// route_deliveries/part-00000.parquet, the delivery events of the last
// hours as the stream would have logged them (route_id, event_ts,
// arrived_ts, seq, delay_min). The data has several
// rows per entity over the history, some late rows (created hours after
// their event) and some duplicates (the same key and event timestamp
// written again later, with corrected values). Every entity's latest row
// lies within a fraction of its view's ttl before -end (a day for
// user_stats, three for user_embedding, twelve hours for packages, ten
// minutes for routes), so a repository materialized up to -end serves a
// value for every id: the demo regenerates the data at each start, with
// -end now. Output is deterministic for a given -seed and -end; files are
// written streaming.
//
//	go run ./examples/parcel-eta/features/gen -out examples/parcel-eta/features/data
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/offline"
)

type config struct {
	out                     string
	users, packages, routes int
	days                    int
	seed                    uint64
	end                     time.Time
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	var c config
	var end string
	fs.StringVar(&c.out, "out", "data", "output folder")
	fs.IntVar(&c.users, "users", 100_000, "number of users")
	fs.IntVar(&c.packages, "packages", 100_000, "number of packages")
	fs.IntVar(&c.routes, "routes", 100_000, "number of routes")
	fs.IntVar(&c.days, "days", 90, "days of history")
	fs.Uint64Var(&c.seed, "seed", 1, "random seed")
	fs.StringVar(&end, "end", "", "end of the history, RFC 3339 (default: now, to the second, UTC)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.users < 1 || c.packages < 1 || c.routes < 1 || c.days < 1 {
		return errors.New("-users, -packages, -routes and -days must be positive")
	}
	c.end = time.Now().UTC().Truncate(time.Second)
	if end != "" {
		t, err := time.Parse(time.RFC3339, end)
		if err != nil {
			return fmt.Errorf("-end: %w", err)
		}
		c.end = t.UTC()
	}
	//nolint:gosec // G301: the example repository is shared with the sluice server, which may run under another account (e.g. a container)
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return fmt.Errorf("create output folder: %w", err)
	}
	for _, g := range []struct {
		name string // the file, under -out
		seed string // names the file's random stream
		fn   func(context.Context, config, *rand.Rand, func([]feature.Value) error) error
		cols []offline.Column
	}{
		{"user_stats.parquet", "user_stats.parquet", genUserStats, userStatsCols()},
		{"user_embedding.parquet", "user_embedding.parquet", genUserEmbedding, embCols("user_id", 78)},
		{"package_features.parquet", "package_features.parquet", genPackages, packageCols()},
		// The route source is a folder (offline pushes add files to it);
		// its stream keeps the name of the former single file, so the
		// data is unchanged.
		{filepath.Join("route_features", "part-00000.parquet"), "route_features.parquet", genRoutes, routeCols()},
		// The event log of the stream source route_deliveries (the
		// stream view route_live's batch source), for training data.
		{filepath.Join("route_deliveries", "part-00000.parquet"), "route_deliveries.parquet", genDeliveries, deliveryCols()},
	} {
		started := time.Now()
		rng := rand.New(rand.NewPCG(c.seed, hashName(g.seed))) //nolint:gosec // G404: seeded so the synthetic data is reproducible; not a secret
		n, err := writeFile(ctx, filepath.Join(c.out, g.name), g.cols, func(emit func([]feature.Value) error) error {
			return g.fn(ctx, c, rng, emit)
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: %d rows in %s\n", filepath.Join(c.out, g.name), n, time.Since(started).Round(time.Millisecond))
	}
	return nil
}

func hashName(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := range len(s) {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}

// writeFile writes the rows gen emits to path, atomically.
func writeFile(ctx context.Context, path string, cols []offline.Column, gen func(emit func([]feature.Value) error) error) (n int64, err error) {
	//nolint:gosec // G301: readable by the sluice server, which may run under another account
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return 0, fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close() // best effort: err is already being returned
			_ = os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	w, err := offline.NewWriter(bw, cols)
	if err != nil {
		return 0, err
	}
	err = gen(func(vals []feature.Value) error {
		n++
		if n&8191 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		return w.Write(vals)
	})
	if err != nil {
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	if err := errors.Join(w.Close(), bw.Flush(), tmp.Close()); err != nil {
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	//nolint:gosec // G302: source data for the sluice server, which may run under another account; 0600 is only CreateTemp's default
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	return n, nil
}

var (
	tInt64   = feature.Type{Kind: feature.KindInt64}
	tTS      = feature.Type{Kind: feature.KindUnixTimestamp}
	tFloat32 = feature.Type{Kind: feature.KindFloat32}
)

func baseCols(key string) []offline.Column {
	return []offline.Column{{Name: key, Type: tInt64}, {Name: "event_timestamp", Type: tTS}, {Name: "created", Type: tTS}}
}

func userStatsCols() []offline.Column {
	cols := baseCols("user_id")
	for i := range 50 {
		cols = append(cols, offline.Column{Name: fmt.Sprintf("u_f%02d", i), Type: tFloat32})
	}
	return cols
}

func embCols(key string, n int) []offline.Column {
	return append(baseCols(key), offline.Column{Name: "embedding", Type: feature.Type{Kind: feature.KindFloat32, List: true, Len: n}})
}

func packageCols() []offline.Column {
	cols := baseCols("package_id")
	for _, n := range []string{"weight_kg", "length_cm", "width_cm", "height_cm", "declared_value", "fragile"} {
		cols = append(cols, offline.Column{Name: n, Type: tFloat32})
	}
	return append(cols, offline.Column{Name: "embedding", Type: feature.Type{Kind: feature.KindFloat32, List: true, Len: 58}})
}

func routeCols() []offline.Column {
	cols := baseCols("route_id")
	for _, n := range []string{"distance_km", "avg_speed_kmh", "traffic_index", "stops", "hour_sin", "hour_cos", "weekday_sin", "weekday_cos"} {
		cols = append(cols, offline.Column{Name: n, Type: tFloat32})
	}
	return append(cols, offline.Column{Name: "embedding", Type: feature.Type{Kind: feature.KindFloat32, List: true, Len: 24}})
}

// timeline emits an entity's update times: from a random start in the
// history, one update about every period (jittered), up to the end. The
// last update lies within recent of the end: when the jittered series
// stops earlier, one more update falls at a random time in that window.
func timeline(c config, rng *rand.Rand, period, recent time.Duration, fn func(ev time.Time) error) error {
	start := c.end.Add(-time.Duration(c.days) * 24 * time.Hour)
	t := start.Add(time.Duration(rng.Int64N(int64(period))))
	var last time.Time
	for !t.After(c.end) {
		last = t.Truncate(time.Second)
		if err := fn(last); err != nil {
			return err
		}
		t = t.Add(period/2 + time.Duration(rng.Int64N(int64(period))))
	}
	if c.end.Sub(last) > recent {
		return fn(recentTime(c, rng, recent))
	}
	return nil
}

// recentTime is a random time within recent before the end (never after it).
func recentTime(c config, rng *rand.Rand, recent time.Duration) time.Time {
	return c.end.Add(-time.Duration(rng.Int64N(int64(recent)))).Truncate(time.Second)
}

// emitRow emits one row with the usual created delay, sometimes a late
// row (created hours after the event), and sometimes a duplicate: the same
// key and event timestamp written again later with corrected values. No
// row is created after end: a row that has not arrived yet by then would
// not be materialized, and its entity would have no fresh value.
func emitRow(rng *rand.Rand, end time.Time, key int64, ev time.Time, vals []feature.Value, jitter func([]feature.Value), emit func([]feature.Value) error) error {
	created := ev.Add(time.Duration(1+rng.IntN(120)) * time.Second)
	if rng.IntN(50) == 0 {
		created = ev.Add(time.Duration(1+rng.IntN(12)) * time.Hour)
	}
	created = minTime(created, end)
	row := append([]feature.Value{{I64: key}, {I64: ev.UnixNano()}, {I64: created.UnixNano()}}, vals...)
	if err := emit(row); err != nil {
		return err
	}
	if rng.IntN(100) == 0 {
		jitter(row[3:])
		row[2] = feature.Value{I64: minTime(created.Add(time.Duration(1+rng.IntN(30))*time.Minute), end).UnixNano()}
		return emit(row)
	}
	return nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func f32(x float64) feature.Value { return feature.Value{F64: float64(float32(x))} }

func noise(rng *rand.Rand, vals []feature.Value, scale float64) {
	for i := range vals {
		if !vals[i].Null && vals[i].F32s == nil {
			vals[i].F64 = float64(float32(vals[i].F64 * (1 + scale*rng.NormFloat64())))
		}
	}
}

func genUserStats(_ context.Context, c config, rng *rand.Rand, emit func([]feature.Value) error) error {
	base := make([]float64, 50)
	vals := make([]feature.Value, 50)
	for u := range c.users {
		activity := math.Exp(rng.NormFloat64()) // a user's overall activity level
		for i := range base {
			base[i] = activity * (1 + float64(i%7)) * rng.ExpFloat64()
		}
		err := timeline(c, rng, 14*24*time.Hour, 24*time.Hour, func(ev time.Time) error {
			for i := range vals {
				vals[i] = f32(base[i] * (1 + 0.1*rng.NormFloat64()))
				if rng.IntN(500) == 0 {
					vals[i] = feature.Value{Null: true} // an occasional missing statistic
				}
			}
			return emitRow(rng, c.end, int64(u+1), ev, vals, func(v []feature.Value) { noise(rng, v, 0.02) }, emit)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// embedding fills dst with a unit vector drifting from base.
func embedding(rng *rand.Rand, base, dst []float32, drift float64) {
	var norm float64
	for i := range dst {
		x := float64(base[i]) + drift*rng.NormFloat64()
		dst[i] = float32(x)
		norm += x * x
	}
	norm = math.Sqrt(norm)
	for i := range dst {
		dst[i] = float32(float64(dst[i]) / norm)
	}
}

func genUserEmbedding(_ context.Context, c config, rng *rand.Rand, emit func([]feature.Value) error) error {
	base := make([]float32, 78)
	for u := range c.users {
		for i := range base {
			base[i] = float32(rng.NormFloat64())
		}
		err := timeline(c, rng, 30*24*time.Hour, 3*24*time.Hour, func(ev time.Time) error {
			e := make([]float32, 78)
			embedding(rng, base, e, 0.1)
			return emitRow(rng, c.end, int64(u+1), ev, []feature.Value{{F32s: e}}, func(v []feature.Value) {
				v[0] = feature.Value{F32s: append([]float32(nil), e...)}
				v[0].F32s[0] += 0.01
			}, emit)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// packageRecent bounds the age of a package's last scan (the view's ttl is 2d).
const packageRecent = 12 * time.Hour

func genPackages(_ context.Context, c config, rng *rand.Rand, emit func([]feature.Value) error) error {
	start := c.end.Add(-time.Duration(c.days) * 24 * time.Hour)
	span := int64(c.end.Sub(start))
	base := make([]float32, 58)
	for p := range c.packages {
		// A package is scanned at pickup, at the hub and out for delivery:
		// 2 to 4 rows within a few days; the last scan is within the
		// last twelve hours (an order in flight).
		t := start.Add(time.Duration(rng.Int64N(span))).Truncate(time.Second)
		var last time.Time
		weight := math.Exp(0.8*rng.NormFloat64()) * 1.5
		l, w, h := 10+rng.Float64()*60, 10+rng.Float64()*40, 2+rng.Float64()*40
		value := math.Exp(3.5 + 1.2*rng.NormFloat64())
		fragile := 0.0
		if rng.IntN(10) == 0 {
			fragile = 1
		}
		for i := range base {
			base[i] = float32(rng.NormFloat64())
		}
		for range 2 + rng.IntN(3) {
			if t.After(c.end) {
				break
			}
			e := make([]float32, 58)
			embedding(rng, base, e, 0.05)
			vals := []feature.Value{
				f32(weight * (1 + 0.01*rng.NormFloat64())), f32(l), f32(w), f32(h), f32(value), f32(fragile), {F32s: e},
			}
			if err := emitRow(rng, c.end, int64(p+1), t, vals, func(v []feature.Value) { noise(rng, v, 0.01) }, emit); err != nil {
				return err
			}
			last = t
			t = t.Add(time.Duration(4+rng.IntN(40)) * time.Hour)
		}
		if c.end.Sub(last) > packageRecent {
			e := make([]float32, 58)
			embedding(rng, base, e, 0.05)
			vals := []feature.Value{
				f32(weight * (1 + 0.01*rng.NormFloat64())), f32(l), f32(w), f32(h), f32(value), f32(fragile), {F32s: e},
			}
			if err := emitRow(rng, c.end, int64(p+1), recentTime(c, rng, packageRecent), vals, func(v []feature.Value) { noise(rng, v, 0.01) }, emit); err != nil {
				return err
			}
		}
	}
	return nil
}

func genRoutes(_ context.Context, c config, rng *rand.Rand, emit func([]feature.Value) error) error {
	base := make([]float32, 24)
	for r := range c.routes {
		dist := 2 + math.Exp(2+0.7*rng.NormFloat64())
		speed := 20 + 50*rng.Float64()
		stops := float64(1 + rng.IntN(40))
		for i := range base {
			base[i] = float32(rng.NormFloat64())
		}
		err := timeline(c, rng, 7*24*time.Hour, 10*time.Minute, func(ev time.Time) error {
			hour := float64(ev.Hour()) + float64(ev.Minute())/60
			wd := float64(ev.Weekday())
			am, pm := hour-8.5, hour-17.5
			rush := math.Exp(-(am*am)/4) + math.Exp(-(pm*pm)/4)
			traffic := math.Max(0, 0.3+0.6*rush+0.1*rng.NormFloat64())
			e := make([]float32, 24)
			embedding(rng, base, e, 0.05)
			vals := []feature.Value{
				f32(dist), f32(speed * (1 - 0.5*traffic)), f32(traffic), f32(stops),
				f32(math.Sin(2 * math.Pi * hour / 24)), f32(math.Cos(2 * math.Pi * hour / 24)),
				f32(math.Sin(2 * math.Pi * wd / 7)), f32(math.Cos(2 * math.Pi * wd / 7)),
				{F32s: e},
			}
			return emitRow(rng, c.end, int64(r+1), ev, vals, func(v []feature.Value) { noise(rng, v, 0.02) }, emit)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// deliveryHistory is how far back the delivery event log reaches.
const deliveryHistory = 6 * time.Hour

func deliveryCols() []offline.Column {
	return []offline.Column{
		{Name: "route_id", Type: tInt64},
		{Name: "event_ts", Type: tTS},
		{Name: "arrived_ts", Type: tTS},
		{Name: "seq", Type: tInt64},
		{Name: "delay_min", Type: feature.Type{Kind: feature.KindFloat64}},
	}
}

// genDeliveries emits each route's delivery events over the last
// deliveryHistory, about one every 20 minutes: the event time, the time the
// stream stored it (seconds later; one in twenty arrives 3 to 10 minutes
// late, past the view's allowed lateness, and is dropped by it), a
// sequence number unique per event as the stream's would be, and the delay
// in minutes. Nothing arrives after -end.
func genDeliveries(_ context.Context, c config, rng *rand.Rand, emit func([]feature.Value) error) error {
	var seq int64
	start := c.end.Add(-deliveryHistory)
	for r := range c.routes {
		typical := math.Exp(1 + 0.5*rng.NormFloat64())
		for t := start.Add(time.Duration(rng.Int64N(int64(40 * time.Minute)))); t.Before(c.end); t = t.Add(time.Duration(1 + rng.Int64N(int64(40*time.Minute)))) {
			ev := t.Truncate(time.Millisecond)
			arrived := ev.Add(time.Duration(rng.Int64N(int64(20 * time.Second))))
			if rng.IntN(20) == 0 {
				arrived = ev.Add(3*time.Minute + time.Duration(rng.Int64N(int64(7*time.Minute))))
			}
			if arrived.After(c.end) {
				continue
			}
			seq++
			delay := math.Round(typical*(0.5+rng.Float64())*10) / 10
			row := []feature.Value{{I64: int64(r + 1)}, {I64: ev.UnixNano()}, {I64: arrived.UnixNano()}, {I64: seq}, {F64: delay}}
			if err := emit(row); err != nil {
				return err
			}
		}
	}
	return nil
}
