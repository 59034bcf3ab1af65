// Package servingapi is the feature server's protocol edges, over the Go
// API of package serving, as httpapi and grpcapi are the model server's
// over modelrepo:
//
//   - Handler: Feast-shaped HTTP JSON endpoints (/get-online-features,
//     /push, /write-to-online-store, /materialize, /health, /metrics)
//     that Feast's own HTTP client and remote online store can talk to;
//   - GRPCService: Feast's feast.serving.ServingService
//     (GetOnlineFeatures, GetFeastServingInfo).
//
// Each decodes its wire format against the request's compiled plan
// (serving.Server.Plan: the join keys' types, the request fields of
// on-demand views), reads through serving.Server.Read and encodes the
// answer; both answer the same request alike, from the same plans,
// store reads, freshness rules and reason codes. This is the one place
// the feature server's errors become HTTP statuses and gRPC codes
// (through apierr); package serving knows no protocol.
package servingapi
