package httpapi

import (
	"context"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelrepo"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// Models is what the HTTP edge needs from the model repository. Errors
// should be *infer.Error values; their Kind picks the HTTP status. Every
// method may be called from many goroutines at once.
type Models interface {
	// Infer runs one request. The request and its tensors belong to the
	// callee until it returns; input Data may alias the request body.
	Infer(ctx context.Context, req *infer.Request) (*infer.Response, error)
	// Metadata describes a model; version "" means the latest ready one.
	Metadata(ctx context.Context, name, version string) (*modelrepo.Metadata, error)
	// Config returns a model's configuration; version "" as for Metadata.
	Config(ctx context.Context, name, version string) (*inferencepb.ModelConfig, error)
	// ModelReady returns nil when the model (version) can serve.
	ModelReady(ctx context.Context, name, version string) error
	// Live reports whether the server process is alive.
	Live() bool
	// Ready reports whether the server can take inference requests.
	Ready() bool
	// Index lists the repository's models, only the ready ones when
	// readyOnly is set.
	Index(ctx context.Context, readyOnly bool) []modelrepo.IndexEntry
	// Load loads or reloads a model (model_repository extension).
	Load(ctx context.Context, name string, opts modelrepo.LoadOptions) error
	// Unload unloads a model.
	Unload(ctx context.Context, name string, opts modelrepo.UnloadOptions) error
	// Statistics returns per-version statistics; name "" means all models
	// and version "" all versions.
	Statistics(ctx context.Context, name, version string) ([]modelrepo.ModelStats, error)
}
