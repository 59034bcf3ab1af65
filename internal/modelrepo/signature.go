package modelrepo

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// versionSignature returns the inputs and outputs of a version's model and,
// on failure, the load failure cause (causeUnreadable errors are the
// backend's, without the path). Most backends read them from the
// model file at path, which must exist; a backend.ConfigSigner (Python
// models) takes them from cfg and checks the version folder itself.
func versionSignature(ctx context.Context, be backend.Backend, cfg *inferencepb.ModelConfig, vdir, path string) (infer.Signature, string, error) {
	if cs, ok := be.(backend.ConfigSigner); ok {
		sig, err := cs.ConfigSignature(ctx, vdir, cfg)
		switch {
		case err == nil:
			return sig, "", nil
		case errors.Is(err, fs.ErrNotExist):
			return sig, causeModelFile, err
		default:
			return sig, causeConfig, err
		}
	}
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return infer.Signature{}, causeModelFile, missingFileError{path}
		}
		return infer.Signature{}, causeModelFile, err
	}
	sig, err := be.Signature(ctx, path)
	if err != nil {
		return infer.Signature{}, causeUnreadable, err
	}
	return sig, "", nil
}

// missingFileError is a default model file that is not there; it matches
// fs.ErrNotExist.
type missingFileError struct{ path string }

func (e missingFileError) Error() string { return fmt.Sprintf("model file %s is missing", e.path) }
func (e missingFileError) Unwrap() error { return fs.ErrNotExist }
