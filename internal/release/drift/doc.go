// Package drift measures how far the live distribution of a model's
// inputs (features) and outputs has moved from a reference, in bounded
// memory, and ranks variables by how much two live groups differ (the
// diagnosis of a failed rollout stage).
//
// # Windows
//
// A Window keeps a rolling sample of one variable: a ring of Buckets time
// buckets (default 6) of Width each (default 10 min), every bucket a
// uniform reservoir of Size values (default 1024) filled by Vitter's
// algorithm R. Memory is Buckets × Size float64s per variable (48 KiB by
// default), allocated once; Observe takes one mutex and never allocates.
// Reading the clock is most of its cost (≈150 ns against ≈30 ns here), so
// ObserveAt takes a time the caller already has. The window covers the current bucket and the Buckets−1 before
// it: when the clock enters a slot's next turn the slot is emptied and
// reused, so old data expires without a background goroutine. A bucket
// that saw count observations and stores len of them gives each stored
// value the weight count/len, so a busy ten minutes weighs more than a
// quiet one, as it did in the traffic; the KS test uses Kish's effective
// sample size (Σw)²/Σw² of those weights. NaN and ±Inf are not observed.
//
// # References
//
// A Reference is a variable's expected distribution, either from training
// data statistics in a reference file, or recorded from a live period
// (Monitor.Record, NewReference: equal-mass bins, 101 quantiles and the
// sample itself, for an exact two-sample KS test). The file is YAML (or
// JSON, read as YAML), strict: unknown fields are errors.
//
//	version: 1
//	variables:
//	  - name: distance_km          # numeric is the default kind
//	    count: 250000              # rows summarised: the reference sample size of the KS p-value (0: exact)
//	    edges: [1, 2.5, 5, 10]     # interior bin edges, strictly increasing: bins (-inf,1) [1,2.5) … [10,+inf)
//	    proportions: [0.1, 0.2, 0.3, 0.25, 0.15]   # len(edges)+1, summing to 1 (±0.001)
//	    quantiles: [0.2, 0.9, 1.6, …, 48]          # values at probabilities j/(len-1): min … max, non-decreasing
//	  - name: region
//	    kind: categorical
//	    categories: [north, south, east]
//	    proportions: [0.5, 0.3, 0.15]              # at most 1 in all; the remainder is "other"
//
// A numeric variable needs edges with proportions (for PSI), quantiles
// (for KS; linear between quantiles, a repeated value is a point mass), or
// both; with quantiles only, PSI uses DefaultBins equal-mass bins derived
// from them. Names and categories are 1 to 128 bytes of printable UTF-8;
// sizes are bounded (MaxBins, MaxQuantiles, MaxCategories, MaxVariables,
// MaxFileSize). MarshalReferences writes the same format, so a recorded
// period can be saved and reloaded.
//
// # Statistics
//
// PSI = Σ (aᵢ − eᵢ)·ln(aᵢ/eᵢ) over the reference bins, with each proportion
// smoothed as (p + ε)/(1 + kε) (ε = 1e-4 by default) so an empty bin gives
// a large finite term. The conventional reading: below 0.1 (PSIModerate)
// stable, 0.1 to 0.25 a moderate shift worth a look, 0.25
// (PSISignificant) and above a significant shift; 0.25 is the default
// threshold. Categorical PSI is the same over categories plus "other".
//
// KS is the largest distance between the two distribution functions; its
// p-value is the asymptotic Kolmogorov distribution Q(√nₑ·D),
// nₑ = nm/(n+m) (as scipy's ks_2samp with method "asymp"). With live
// windows of thousands of values a KS test notices small shifts; PSI is
// the measure of size, and the ranking uses it first. Categorical variables
// have no KS statistic (NaN).
//
// # Monitor
//
// A Monitor holds the variables of one scope (a service's features or
// outputs, or one rollout group), declared in configuration: observations of
// other names are ignored, so label cardinality is bounded by the
// configuration. Check compares each window having at least MinSamples
// (default 100) observations with its reference, sets
//
//	sluice_drift_psi{scope,name}
//	sluice_drift_ks_pvalue{scope,name}      (numeric variables)
//
// and, when PSI reaches PSIThreshold (default 0.25) or the p-value falls
// below KSAlpha (default 0.01) after being on the other side, increments
// sluice_drift_events_total{scope,name,kind="psi"|"ks"} once and logs
// "drift detected" (the return is logged as "drift cleared"). Check
// returns the results ranked: PSI descending, then KS statistic
// descending, then name. Run calls Check every Interval (default 30 s);
// Last returns the latest results for gates and triggers.
//
// Rank(failing, stable...) compares the live windows of one group with
// the pooled windows of others, with no reference: bins are equal-mass
// bins of the stable sample. Its first result is the variable that
// differs most, the first answer to "why did this group fail?".
package drift
