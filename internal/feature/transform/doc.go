// Package transform compiles and evaluates the expressions of on-demand
// feature views (Feast's OnDemandFeatureView): features computed at
// request time from request data and other views' features.
//
// Expressions are expr-lang (the language of the gateway's fallback
// rules), type-checked when the feature repository is loaded: an unknown
// name, a disallowed operator or function, or a result that does not fit
// the feature's dtype is an error then, never at request time. A View is
// compiled once per registry snapshot and shared by serving and
// historical retrieval, so training rows and served values come from the
// same code. Bad input is a per-value Outcome, never an error: a missing
// input, a failed evaluation (integer division by zero, a value out of
// the dtype's range) or a result that is NaN or infinite.
package transform
