// Package perf is Sluice's load generator, a perf_analyzer-class tool that
// drives any KServe v2 server (HTTP JSON, HTTP binary tensors or gRPC) and
// reports throughput, client latency percentiles and, where the server has
// the statistics extension, the server-side split of each request into
// queue and compute time.
//
// A run sweeps load levels: concurrency (closed loop, N requests always
// outstanding) or request rate (open loop, arrivals on a constant or Poisson
// schedule whatever the answers do). At each level it measures in windows
// (time- or count-based) until three consecutive windows agree within the
// stability percentage in both throughput and the stabilizing latency, or
// until the trial limit, and reports the three stable windows together.
// Every loop is bounded by time and count, and cancelling the context stops
// a run cleanly with the levels measured so far.
package perf
