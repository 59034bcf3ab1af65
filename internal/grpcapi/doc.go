// Package grpcapi is Sluice's KServe v2 / Triton gRPC edge: it serves
// inference.GRPCInferenceService (Triton's field numbers) on top of a
// modelrepo.Models implementation, plus the standard grpc.health.v1 service and
// server reflection.
//
// Requests are converted into package infer's types: typed contents and
// raw_input_contents both become tensors in the KServe binary wire layout,
// checked against their shapes, and outputs always travel back in
// raw_output_contents, as Triton does. This package and httpapi are the
// only places that turn an *apierr.Error's Kind into a status code; every
// error status carries an errdetails.ErrorInfo whose Reason is the
// snake_case reason code (domain "sluice") and whose message names the
// offending tensor or model.
package grpcapi
