package modelrepo

import (
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// LoadOptions are the options of a repository load request (Triton's
// model_repository extension). Config, when set, replaces the model's
// config.pbtxt and forces a reload; Files maps "<version>/<name>" paths to
// file contents that override the files on disk and require Config.
type LoadOptions struct {
	Config *pb.ModelConfig
	Files  map[string][]byte
}
