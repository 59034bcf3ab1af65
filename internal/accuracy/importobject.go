package accuracy

import (
	"context"
	"fmt"
	"path"
	"strings"

	"github.com/sluice-ml/sluice/internal/objstore"
)

// ReadOutcomeObject is ReadOutcomeFile for an object on object storage
// (s3://, gs://, as://; credentials from the environment): .jsonl and
// .csv objects are streamed, .parquet objects read by ranged reads, never
// downloaded whole.
func ReadOutcomeObject(ctx context.Context, uri, service string, o ImportOptions, fn func([]Outcome) error) error {
	o.defaults()
	b, err := objstore.OpenURI(ctx, uri, objstore.Options{})
	if err != nil {
		return err
	}
	defer b.Close()
	switch strings.ToLower(path.Ext(uri)) {
	case ".jsonl", ".ndjson", ".csv":
		r, err := b.NewReader(ctx, "", 0, -1)
		if err != nil {
			return err
		}
		defer r.Close()
		if strings.HasSuffix(strings.ToLower(uri), ".csv") {
			return readCSV(r, uri, service, o, fn)
		}
		return readJSONL(r, uri, service, fn)
	case ".parquet":
		attrs, err := b.Attributes(ctx, "")
		if err != nil {
			return err
		}
		return readParquet(b.NewReaderAt(ctx, "", attrs.Size, objstore.ReaderAtOptions{}), attrs.Size, uri, service, o, fn)
	default:
		return fmt.Errorf("%s: want a .jsonl, .csv or .parquet object", uri)
	}
}
