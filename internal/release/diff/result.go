package diff

import (
	"time"

	"github.com/sluice-ml/sluice/internal/release/ks"
)

// ReportSchema is the version of report.json's layout. Fields are only
// ever added within a version; renaming or removing one bumps it.
const ReportSchema = 1

// Result is the outcome of Analyze and the content of report.json.
type Result struct {
	// Schema is ReportSchema.
	Schema int `json:"schema"`
	// GeneratedAt is when Analyze finished.
	GeneratedAt time.Time `json:"generated_at"`
	// Mode is "arms" (two arms of each record in one recording) or "join"
	// (two recordings joined by request_id).
	Mode string `json:"mode"`
	// A and B describe the two sides; Δ is always B − A.
	A Side `json:"a"`
	B Side `json:"b"`
	// Options are the effective options, defaults filled in.
	Options OptionsReport `json:"options"`
	// Passed is true when no gate failed.
	Passed bool `json:"passed"`
	// Failed lists the IDs of the failed gates (see Gate.ID), in report
	// order; empty when Passed.
	Failed []string `json:"failed"`
	// Warnings are problems that fail no gate but may mislead a reader,
	// such as a slice key missing from most records.
	Warnings []string `json:"warnings"`
	// Counts say how many records were read, paired and compared.
	Counts Counts `json:"counts"`
	// From and To span the times of the paired records (zero when none).
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Outputs hold the per-output comparison, sorted by name.
	Outputs []OutputStats `json:"outputs"`
	// Latency compares the arms' latencies over successful responses.
	Latency Latency `json:"latency"`
	// Errors compares the arms' error rates.
	Errors ErrorRates `json:"errors"`
	// Slices break the figures down by each slice key, in option order.
	Slices []SliceReport `json:"slices"`
	// Worst are the requests with the largest |Δ|, per output.
	Worst []WorstExamples `json:"worst"`
	// Gates are every gate evaluated, failed or not.
	Gates []Gate `json:"gates"`
}

// Side describes one side of the comparison.
type Side struct {
	// Label names the side in the report ("primary", "shadow", "A", …).
	Label string `json:"label"`
	// Arm is the record arm the side's values come from.
	Arm string `json:"arm"`
	// Models counts the "model:version" pairs that answered.
	Models map[string]int `json:"models"`
}

// OptionsReport echoes the effective options in report.json.
type OptionsReport struct {
	Outputs              []string             `json:"outputs"`
	Threshold            float64              `json:"threshold"`
	Relative             bool                 `json:"relative"`
	MaxSignificantShare  float64              `json:"max_significant_share"`
	KSAlpha              float64              `json:"ks_alpha"`
	KSMinEffect          float64              `json:"ks_min_effect"`
	KSMinEffectSigma     float64              `json:"ks_min_effect_sigma"`
	MinEffects           map[string]MinEffect `json:"min_effects,omitempty"`
	KSReportOnly         bool                 `json:"ks_report_only"`
	MinLatencySliceCount int                  `json:"min_latency_slice_count"`
	MaxP95Regression     float64              `json:"max_p95_regression"`
	MinP95IncreaseMS     float64              `json:"min_p95_increase_ms"`
	MaxErrorRateIncrease float64              `json:"max_error_rate_increase"`
	Slices               []SliceKey           `json:"slices"`
	MinSliceCount        int                  `json:"min_slice_count"`
	MissingSliceWarn     float64              `json:"missing_slice_warn"`
	WorstN               int                  `json:"worst_n"`
}

// Counts say how the records became comparisons.
type Counts struct {
	// RecordsA and RecordsB are the records read from each recording
	// (RecordsB is 0 in arms mode).
	RecordsA int `json:"records_a"`
	RecordsB int `json:"records_b"`
	// Duplicates are records skipped because their request_id was seen
	// before in the same recording (join mode).
	Duplicates int `json:"duplicates"`
	// UnmatchedA counts side A without a side B: in join mode a record
	// of A whose request_id is not in B, in arms mode a record lacking arm
	// B. UnmatchedB is the converse.
	UnmatchedA int `json:"unmatched_a"`
	UnmatchedB int `json:"unmatched_b"`
	// Incomplete are records that have neither side's arm.
	Incomplete int `json:"incomplete"`
	// Pairs are the requests with both sides present.
	Pairs int `json:"pairs"`
	// BothOK are the pairs in which both sides succeeded; only these are
	// compared.
	BothOK int `json:"both_ok"`
}

// OutputStats compares one output across the arms.
type OutputStats struct {
	// Name is the output name.
	Name string `json:"name"`
	// Compared are the requests whose output both sides returned with the
	// same number of elements.
	Compared int `json:"compared"`
	// Mismatched are successful pairs where the output was missing on one
	// side, its length differed, or one side had a non-finite value where
	// the other had a number. The significant_share gate counts them as
	// deviating: its value is (Significant+Mismatched)/(Compared+Mismatched).
	Mismatched int `json:"mismatched"`
	// Elements are the element pairs compared (Compared × elements).
	Elements int `json:"elements"`
	// MeanDelta, MeanAbsDelta and MaxAbsDelta describe Δ over elements.
	MeanDelta    float64 `json:"mean_delta"`
	MeanAbsDelta float64 `json:"mean_abs_delta"`
	MaxAbsDelta  float64 `json:"max_abs_delta"`
	// Significant counts requests whose largest element |Δ| exceeds the
	// threshold; SignificantShare is Significant / Compared.
	Significant      int     `json:"significant"`
	SignificantShare float64 `json:"significant_share"`
	// KS tests whether both sides' values share one distribution.
	KS ks.Result `json:"ks"`
	// KSEffect is how far apart the distributions are: the mean absolute
	// difference of their 1st to 99th percentiles (relative to |A|'s with
	// Options.Relative). The ks gate needs it above KSMinEffect.
	KSEffect float64 `json:"ks_effect"`
	// KSMinEffect is the minimum effect the ks gate applied to this output
	// (the same in every slice: it is computed from side A overall);
	// negative: any difference.
	KSMinEffect float64 `json:"ks_min_effect"`
	// KSVerdict is the ks test's reading: KSNotTested, KSNotSignificant,
	// KSSignificant (p < alpha and the effect above the minimum: the gate
	// fails unless report-only) or KSBelowMinEffect (significant but below
	// the minimum effect: reported, not failed).
	KSVerdict string `json:"ks_verdict"`
	// A and B summarise each side's values.
	A Summary `json:"a"`
	B Summary `json:"b"`
	// Histogram, CDF and DeltaHistogram feed the plots; omitted in slices.
	Histogram      *Histogram `json:"histogram,omitempty"`
	CDF            *CDF       `json:"cdf,omitempty"`
	DeltaHistogram *Histogram `json:"delta_histogram,omitempty"`
}

// The ks verdicts of OutputStats.KSVerdict.
const (
	KSNotTested      = "not_tested"
	KSNotSignificant = "not_significant"
	KSSignificant    = "significant"
	KSBelowMinEffect = "significant_below_min_effect"
)

// Percentiles describe one side's latency in milliseconds.
type Percentiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P95 float64 `json:"p95_ms"`
	P99 float64 `json:"p99_ms"`
}

// Latency compares the sides' latencies.
type Latency struct {
	A Percentiles `json:"a"`
	B Percentiles `json:"b"`
	// P95Change is (p95_B − p95_A)/p95_A; 0 when p95_A is 0.
	P95Change float64 `json:"p95_change"`
}

// ErrorRates compare how often each side failed, over the pairs.
type ErrorRates struct {
	Requests int     `json:"requests"`
	ErrorsA  int     `json:"errors_a"`
	ErrorsB  int     `json:"errors_b"`
	RateA    float64 `json:"rate_a"`
	RateB    float64 `json:"rate_b"`
	// Reasons counts B's error reasons ("status 503: overloaded").
	ReasonsB map[string]int `json:"reasons_b,omitempty"`
}

// SliceReport breaks the figures down by one key.
type SliceReport struct {
	// Key is the slice key as given.
	Key SliceKey `json:"key"`
	// Missing counts pairs without the key; MissingShare is its share.
	Missing      int     `json:"missing"`
	MissingShare float64 `json:"missing_share"`
	// Groups are the key's values or buckets, in value or bucket order,
	// "(missing)" last.
	Groups []SliceGroup `json:"groups"`
}

// SliceGroup holds the figures for the pairs sharing one slice value.
type SliceGroup struct {
	// Value is the slice value or bucket, e.g. "eu" or "[2,5)".
	Value string `json:"value"`
	// Pairs are the requests in the slice.
	Pairs int `json:"pairs"`
	// Gated is false when the slice is smaller than MinSliceCount: its
	// figures are reported but its gates do not count.
	Gated bool `json:"gated"`
	// Passed is false when one of the slice's gates failed.
	Passed  bool          `json:"passed"`
	Outputs []OutputStats `json:"outputs"`
	Latency Latency       `json:"latency"`
	Errors  ErrorRates    `json:"errors"`
}

// WorstExamples are the largest deviations of one output.
type WorstExamples struct {
	Output   string    `json:"output"`
	Examples []Example `json:"examples"`
}

// Example is one request with a large deviation, with its context.
type Example struct {
	RequestID string    `json:"request_id"`
	Time      time.Time `json:"time"`
	// Index is the element of the output with the largest |Δ|.
	Index int     `json:"index"`
	A     float64 `json:"a"`
	B     float64 `json:"b"`
	Delta float64 `json:"delta"`
	// Significant is |Δ| > threshold.
	Significant bool `json:"significant"`
	// Headers, Features and Request are the record's context (from A's
	// record in join mode).
	Headers  map[string]string `json:"headers,omitempty"`
	Features map[string]any    `json:"features,omitempty"`
	Request  map[string]any    `json:"request,omitempty"`
}

// Gate names.
const (
	GateSignificantShare = "significant_share"
	GateKS               = "ks"
	GateLatencyP95       = "latency_p95"
	GateErrorRate        = "error_rate"
	GateData             = "data"
)

// Gate is one pass/fail check.
type Gate struct {
	// ID names the gate uniquely: name, then [output] when per output,
	// then @key=value when per slice, e.g. "ks[eta_prediction]@x-region=eu".
	ID string `json:"id"`
	// Name is one of significant_share, ks, latency_p95, error_rate, data.
	Name   string `json:"name"`
	Output string `json:"output,omitempty"`
	// Slice is "key=value" for a slice gate.
	Slice string `json:"slice,omitempty"`
	// Value is the measured figure and Limit the bound it was held to;
	// for ks the value is the p-value and it fails below the limit, for
	// the others it fails above.
	Value  float64 `json:"value"`
	Limit  float64 `json:"limit"`
	Passed bool    `json:"passed"`
	// Message explains the outcome in words.
	Message string `json:"message"`
}
