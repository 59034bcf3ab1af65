// Package infer holds the leaf types of an inference: data types, tensors,
// requests and responses. Of Sluice it imports only the error vocabulary
// (apierr), so every layer (protocol edges, scheduler, backends) can share
// it.
//
// Tensor data is always kept in the KServe v2 binary wire layout:
// little-endian, row-major, BOOL as one byte per element, and BYTES as a
// sequence of elements each prefixed by its 4-byte little-endian length.
// Keeping one layout means the binary HTTP extension and gRPC raw contents
// pass through without conversion.
package infer
