// Package replay sends the requests of a recording (package record) to a
// model endpoint again and records the answers as a new recording, which
// package diff can compare with the original by request_id.
//
// # Targets
//
// A Target answers one recorded request:
//
//   - GRPCTarget sends the record's model inputs (converted from their
//     KServe v2 JSON form to tensors) to a KServe v2 gRPC endpoint, such
//     as a Sluice model server or Triton;
//   - HTTPTarget posts them, as recorded, to a KServe v2 HTTP endpoint
//     (POST /v2/models/{model}[/versions/{version}]/infer);
//   - ServiceTarget posts the record's request body, with its recorded
//     (allow-listed) headers, to a Sluice inference service, and records
//     the service's answer under the service's output names.
//
// The KServe targets call the model and version they are given, or else
// the ones of each record's primary arm. A call that fails is an answer
// like any other: its arm has the status an HTTP edge answers for the
// error (apierr.HTTPStatus) and a reason.
//
// # Replayer
//
// Replayer.Run reads a record.Source, starts calls at a limited rate
// (evenly spaced, no bursts) with bounded concurrency, and writes one
// record per request to a record.Sink in the source's order, whatever
// order the calls finish in. Memory is bounded: at most a small multiple
// of the concurrency is held between reading and writing. Each new record
// keeps the original's request_id, time, service, shadow key, headers,
// request, features and inputs, and holds one arm, "primary", with the
// answer and the call's latency. A progress callback sees done, total,
// errors and rate. When the context ends, Run stops reading, abandons the
// calls in flight and writes every record whose call had finished.
//
// Metrics: sluice_replay_requests_total{result=ok|error} and
// sluice_replay_request_duration_seconds.
package replay
