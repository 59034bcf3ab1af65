package modelrepo

import (
	"context"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// Models is what the KServe protocol edges (httpapi and grpcapi) need from
// the model repository. It is declared once, here beside the types it
// speaks in, because both edges consume exactly the same thing; each
// edge's tests run against a hand-written fake, and *Manager is the
// production implementation.
//
// Errors should be *apierr.Error values where the caller should see a
// specific status: their Kind picks the HTTP status or gRPC code. Every
// method may be called from many goroutines at once.
type Models interface {
	// Infer runs one request. The request and its tensors belong to the
	// callee until it returns: input data may alias the caller's wire
	// buffer (the HTTP body, the gRPC message) and must not be kept after
	// Infer returns.
	Infer(ctx context.Context, req *infer.Request) (*infer.Response, error)
	// Metadata describes a model; version "" means the latest ready one.
	Metadata(ctx context.Context, name, version string) (*Metadata, error)
	// Config returns a model's configuration; version "" as for Metadata.
	// The caller does not modify it.
	Config(ctx context.Context, name, version string) (*inferencepb.ModelConfig, error)
	// ModelReady returns nil when the model (version) can serve.
	ModelReady(ctx context.Context, name, version string) error
	// Live reports whether the server process is alive.
	Live() bool
	// Ready reports whether the server can take inference requests.
	Ready() bool
	// Index lists the repository's models, only the ready ones when
	// readyOnly is set.
	Index(ctx context.Context, readyOnly bool) []IndexEntry
	// Load loads or reloads a model (model_repository extension).
	Load(ctx context.Context, name string, opts LoadOptions) error
	// Unload unloads a model.
	Unload(ctx context.Context, name string, opts UnloadOptions) error
	// Statistics returns per-version statistics; name "" means all models
	// and version "" all versions.
	Statistics(ctx context.Context, name, version string) ([]ModelStats, error)
}

var _ Models = (*Manager)(nil)
