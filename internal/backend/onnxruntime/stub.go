//go:build !cgo

package onnxruntime

import (
	"context"
	"log/slog"

	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/infer"
)

// Backend stands in for the ONNX Runtime backend in a binary built without
// cgo. It cannot be created: New always returns ErrNotBuiltIn.
type Backend struct{}

var _ backend.Backend = (*Backend)(nil)

// New returns ErrNotBuiltIn: ONNX Runtime needs cgo.
func New(opts Options, logger *slog.Logger) (*Backend, error) {
	return nil, ErrNotBuiltIn
}

// LoadedVersion returns "": no library can be loaded without cgo.
func (b *Backend) LoadedVersion() string { return "" }

// Name returns "onnxruntime", the config.pbtxt backend name.
func (b *Backend) Name() string { return "onnxruntime" }

// DefaultFilename returns "model.onnx".
func (b *Backend) DefaultFilename() string { return "model.onnx" }

// Close does nothing.
func (b *Backend) Close() error { return nil }

// Signature returns ErrNotBuiltIn.
func (b *Backend) Signature(ctx context.Context, path string) (infer.Signature, error) {
	return infer.Signature{}, ErrNotBuiltIn
}

// Load returns ErrNotBuiltIn.
func (b *Backend) Load(ctx context.Context, opts backend.LoadOptions) (backend.Instance, error) {
	return nil, ErrNotBuiltIn
}

// Instance stands in for a loaded ONNX model; none can exist without cgo.
type Instance struct{}

var _ backend.Instance = (*Instance)(nil)

// Signature returns an empty signature.
func (in *Instance) Signature() infer.Signature { return infer.Signature{} }

// Execute returns ErrNotBuiltIn.
func (in *Instance) Execute(ctx context.Context, inputs []infer.Tensor, outputs []string) ([]infer.Tensor, error) {
	return nil, ErrNotBuiltIn
}

// Close does nothing.
func (in *Instance) Close() error { return nil }
