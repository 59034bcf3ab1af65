// Package httpapi serves the KServe v2 (Open Inference Protocol) HTTP API
// with Triton's extensions: health, server and model metadata, model
// readiness and configuration, inference with JSON and binary tensor data,
// statistics and the model repository API. It is one of the two places
// (with grpcapi) that turn domain errors into status codes.
//
// Inference request bodies are decoded by a purpose-built scanner that
// writes tensor data straight into the wire layout of infer.Tensor, and
// responses are written with pooled buffers; encoding/json serves only the
// small bodies of the other endpoints.
package httpapi
