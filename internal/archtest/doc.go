// Package archtest checks the dependency rules of docs/architecture.md
// ("Dependency rules") on the module's real import graph, read with
// "go list", so that a change breaking one fails "go test ./..." and so
// the build. It has no code of its own, only the test.
//
// The rules, each one a row of rules in archtest_test.go:
//
//   - infer imports nothing internal but the error vocabulary (apierr);
//     apierr imports nothing internal but scrub and jsonenc, two leaves;
//     generated code lives only in internal/pb.
//   - Backends know no protocol and no scheduler: no edge, KServe client
//     or codec, no batch or modelrepo (the batcher calls backends, never
//     the reverse). The model configuration (modelconfig, inferencepb's
//     ModelConfig) is theirs to read.
//   - Scheduling (batch) and the repository (modelrepo) know no protocol.
//   - The feature store knows nothing of models or the gateway; of the
//     generated packages it imports only its own wire format,
//     internal/pb/feastpb.
//   - The gateway never reaches into the model server (modelrepo, batch,
//     backends, modelconfig) and never imports another component's edge
//     (httpapi, grpcapi, feature/servingapi). It may use feature/serving's
//     Go API (Server.GetOnlineFeatures), which is the feature store's
//     in-process port, not its edges.
//   - The release-hook interface (gateway/release) imports no gateway
//     code: only the settings (config) and the feature and tensor types
//     its views show (feature, feature/serving, infer).
//   - httpapi and grpcapi, the model server's edges, are imported only by
//     the wiring (cli) and the metrics inventory (tools).
//   - feature/servingapi, the feature server's HTTP and gRPC edges, is
//     imported only by the wiring, the metrics inventory and the benchmark
//     harness (bench); its Go API, feature/serving, never imports it.
//   - config is data: it imports only leaf packages that own the settings
//     sluice.yaml holds (plain types and pure checks; they import nothing
//     internal but each other, nothing third-party but yaml).
//   - telemetry imports nothing internal.
//   - Nothing imports internal/cli but cmd/sluice.
package archtest
