// Package diff compares the two sides of a shadow or replay recording —
// two arms of each record, or two recordings joined by request_id — and
// writes the evidence as report.json and report.html.
//
// # Figures
//
// For every numeric output both sides returned, Analyze computes the
// per-request difference Δ = B − A (or (B − A)/|A| with
// Options.Relative), elementwise; a request's Δ is its element with the
// largest |Δ|, and the request deviates significantly when |Δ| exceeds
// Options.Threshold (0.15). It runs a two-sample Kolmogorov–Smirnov test
// on the two sides' values (exact p-value for small samples, Kolmogorov's
// asymptotic distribution for large ones), builds histograms and CDFs,
// computes p50/p95/p99 latency per side over successful responses, and
// counts errors. The same figures are computed per slice: per value of a
// header, feature or request field (numeric values in buckets), so a
// regression confined to one region shows as one failing slice.
//
// # Gates
//
// Result.Passed is false, and Result.Failed names the gates, when
//   - significant_share[output]: the share of requests deviating
//     significantly (or whose output went missing or changed shape)
//     exceeds Options.MaxSignificantShare (1 %);
//   - ks[output]: the KS p-value is below Options.KSAlpha (0.01) and
//     the distributions' percentiles are on average further apart than
//     the output's minimum effect: Options.MinEffects[output], else
//     Options.KSMinEffect (output units), else Options.KSMinEffectSigma
//     (0.1) standard deviations of side A's values. A significant shift
//     below the minimum passes but is never silent: the gate's message
//     and a warning say "significant but below the minimum effect", and
//     OutputStats.KSVerdict records it. Options.KSReportOnly reports a
//     shift above the minimum without failing;
//   - latency_p95: B's p95 latency exceeds A's by more than
//     Options.MaxP95Regression (10 %);
//   - error_rate: B's error rate exceeds A's by more than
//     Options.MaxErrorRateIncrease (one percentage point);
//   - data: nothing could be compared.
//
// Slice gates (significant_share, ks and error_rate, suffixed with
// "@key=value") count for slices with at least Options.MinSliceCount
// compared requests; latency_p95 for slices with at least
// Options.MinLatencySliceCount requests on each side (100), since a p95
// from a few dozen requests is noise.
//
// # report.json
//
// report.json is Result encoded as JSON; the field names are in the json
// tags of Result and the types it holds, and ReportSchema versions them.
// The top level has schema, generated_at, mode ("arms" or "join"), a and b
// (label, arm, models), options, passed, failed (gate ids), warnings,
// counts, from, to, outputs (per output: compared, mismatched, elements,
// mean_delta, mean_abs_delta, max_abs_delta, significant,
// significant_share, ks {statistic, p_value, n_a, n_b, method},
// ks_effect, ks_min_effect, ks_verdict, a and b
// summaries, histogram, cdf, delta_histogram), latency (a and b
// {n, p50_ms, p95_ms, p99_ms}, p95_change), errors, slices (per key:
// key, missing, missing_share, groups with the same figures), worst (per
// output the worst examples with headers, features and request) and gates
// (id, name, output, slice, value, limit, passed, message). Every number
// is finite.
//
// report.html is self-contained: inline CSS, plots rendered by gonum/plot
// as SVG in data: URLs, no scripts, no network.
package diff
