package modelrepo

import (
	"path/filepath"
	"strings"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/modelconfig"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// LoadOptions are the options of a repository load request (Triton's
// model_repository extension). Config, when set, replaces the model's
// config.pbtxt and forces a reload; Files maps paths inside the model
// folder ("<version>/<name>", or a name at the folder's top) to file
// contents that replace the files on disk and require Config.
type LoadOptions struct {
	Config *pb.ModelConfig
	Files  map[string][]byte
}

// maxOverrideNameShown bounds how much of a client-chosen file name goes
// into an error message.
const maxOverrideNameShown = 64

// Check refuses load options that no load of model name can take, with
// the words Triton's load answers start with ("failed to load '<name>'",
// which its clients and QA match on): files without a config, and a file
// path that leaves the model folder. Both API edges call it before
// Load, and Load calls it again, so HTTP and gRPC take the same
// requests.
func (o LoadOptions) Check(name string) error {
	if len(o.Files) > 0 && o.Config == nil {
		return apierr.Errorf(apierr.KindInvalid, ReasonInvalidLoadRequest,
			"failed to load '%s', failed to poll from model repository: file overrides need a config override (a 'config' load parameter: the files replace the model folder)", name)
	}
	for rel := range o.Files {
		if !filepath.IsLocal(filepath.FromSlash(rel)) || strings.Contains(rel, `\`) {
			return apierr.Errorf(apierr.KindInvalid, ReasonInvalidLoadRequest,
				"failed to load '%s': file override 'file:%s' is not a relative path inside the model folder", name, shortName(rel))
		}
	}
	return nil
}

// ConfigParamError is the answer to a load whose "config" parameter does
// not parse: err's reason, in Triton's opening words.
func ConfigParamError(name string, err error) error {
	return apierr.Errorf(apierr.KindInvalid, modelconfig.ReasonInvalidConfig, "failed to load '%s': load parameter 'config': %v", name, err)
}

// shortName bounds a client-chosen name before it goes into a message.
func shortName(s string) string {
	if len(s) <= maxOverrideNameShown {
		return s
	}
	return s[:maxOverrideNameShown] + "..."
}
