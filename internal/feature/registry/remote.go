package registry

import (
	"github.com/sluice-ml/sluice/internal/objstore"
)

// SourceLocation parses a file source's object-storage path (s3://,
// gs://, as://) with its s3_endpoint_override.
func SourceLocation(path, s3EndpointOverride string) (objstore.Location, error) {
	loc, err := objstore.Parse(path)
	if err != nil || s3EndpointOverride == "" {
		return loc, err
	}
	return loc.WithEndpoint(s3EndpointOverride)
}

// checkRemotePath checks a file source's path when it names object
// storage, and its s3_endpoint_override; "" when both are fine.
func checkRemotePath(path, s3EndpointOverride string) string {
	if !objstore.IsURI(path) {
		if s3EndpointOverride != "" {
			return "s3_endpoint_override is only for a path at s3://"
		}
		return ""
	}
	if _, err := SourceLocation(path, s3EndpointOverride); err != nil {
		return err.Error()
	}
	return ""
}
