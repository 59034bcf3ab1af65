// Command outcomes makes synthetic delivery outcomes for the predictions
// in a Sluice prediction log, so the demo's online accuracy has something
// to join: for each logged prediction of parcel-eta it writes one outcome
// line (JSONL, as `sluice accuracy import` and POST .../outcomes take
// them), the actual minutes being the served ETA times a random factor,
// with an extra delay in the regions given by -late.
//
//	go run ./examples/parcel-eta/outcomes -log examples/parcel-eta/data/accuracy/predictions -out outcomes.jsonl
//	sluice accuracy import outcomes.jsonl --service parcel-eta
//
// Outcomes come out shuffled, as real feedback does; -share keeps only a
// part of them (label coverage below 1).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-ml/sluice/internal/release/record"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "outcomes:", err)
		os.Exit(1)
	}
}

type outcome struct {
	Key    string             `json:"key"`
	Values map[string]float64 `json:"values"`
	Time   string             `json:"time"`
}

func run(args []string, stdout io.Writer) error {
	fl := flag.NewFlagSet("outcomes", flag.ContinueOnError)
	logDir := fl.String("log", "examples/parcel-eta/data/accuracy/predictions", "the prediction log folder")
	out := fl.String("out", "-", `the JSONL file ("-": stdout)`)
	service := fl.String("service", "parcel-eta", "the service")
	output := fl.String("output", "eta_minutes", "the output the ETA is in")
	observed := fl.String("observed", "actual_minutes", "the observed value's name")
	noise := fl.Float64("noise", 0.08, "relative noise of the actual time (standard deviation)")
	late := fl.String("late", "", "extra delay per region, e.g. sa=1.3,us=1.05 (the header x-region)")
	share := fl.Float64("share", 1, "share of predictions that get an outcome")
	seed := fl.Uint64("seed", 1, "random seed")
	if err := fl.Parse(args); err != nil {
		return err
	}
	factors := map[string]float64{}
	for kv := range strings.SplitSeq(*late, ",") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil || f <= 0 {
			return fmt.Errorf("-late %q: want region=factor", kv)
		}
		factors[k] = f
	}
	src, err := record.OpenFiles(*logDir, record.ReadOptions{Service: *service, SkipBad: true})
	if err != nil {
		return err
	}
	defer src.Close()
	rng := rand.New(rand.NewPCG(*seed, 7)) //nolint:gosec // G404: seeded synthetic data, reproducible on purpose
	var outs []outcome
	for {
		r, err := src.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if r.Outcome != nil || rng.Float64() >= *share {
			continue // a joined pair, or left without an outcome
		}
		eta := r.Arms[record.ArmPrimary].Outputs[*output]
		if len(eta) == 0 || r.JoinKey == "" {
			continue
		}
		f := 1 + rng.NormFloat64()**noise
		if x, ok := factors[r.Headers["x-region"]]; ok {
			f *= x
		}
		outs = append(outs, outcome{
			Key: r.JoinKey, Values: map[string]float64{*observed: max(eta[0]*f, 1)},
			Time: r.Time.Add(time.Duration(eta[0]*f) * time.Minute).UTC().Format(time.RFC3339),
		})
	}
	rng.Shuffle(len(outs), func(i, j int) { outs[i], outs[j] = outs[j], outs[i] })
	w := stdout
	if *out != "-" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	enc := json.NewEncoder(w)
	for _, o := range outs {
		if err := enc.Encode(o); err != nil {
			return err
		}
	}
	if *out != "-" {
		fmt.Fprintf(stdout, "wrote %d outcomes to %s\n", len(outs), *out)
	}
	return nil
}
