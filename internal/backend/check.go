package backend

import (
	"context"

	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// VersionChecker is implemented by backends that can check a model version
// offline beyond its signature, for `sluice repo check`: the Python and
// PyTorch backends parse model.py, compare a state_dict with its class and
// so on. CheckVersion gets the version folder and the version's effective
// configuration, and returns every problem found; nil means none. It must
// not leave anything running once it returns, and should return promptly
// when ctx is done.
type VersionChecker interface {
	CheckVersion(ctx context.Context, versionDir string, cfg *inferencepb.ModelConfig) []Problem
}

// Problem is one finding of a VersionChecker, located in a file; Line and
// Col are 1-based, 0 when unknown.
type Problem struct {
	File      string
	Line, Col int
	Msg       string
}
