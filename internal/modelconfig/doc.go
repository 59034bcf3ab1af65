// Package modelconfig reads, completes and checks model configurations:
// Triton-compatible config.pbtxt files (protobuf text format against
// proto/model_config.proto) and their JSON form.
//
// The usual order is Parse, ApplyDefaults, AutoComplete (with the signature
// the backend reports), Validate and ValidateSignature. Every problem found
// carries the file, line and column of the field it is about, taken from a
// Source that Parse builds alongside the message.
package modelconfig
