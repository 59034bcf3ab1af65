package record

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/sluice-ml/sluice/internal/objstore"
)

// Open opens the JSONL recording at spec: what OpenFiles reads, or a
// location on object storage (s3://, gs://, as://, with credentials from
// the environment as objstore.OpenURI reads them): one .jsonl object, a
// folder whose .jsonl objects (directly under it) are read in name order,
// or a folder and a pattern on the last segment
// (s3://bucket/recordings/records-20260301*.jsonl). Objects are streamed,
// never downloaded whole first.
func Open(ctx context.Context, spec string, opts ReadOptions) (*FileReader, error) {
	if !objstore.IsURI(spec) {
		return OpenFiles(spec, opts)
	}
	return openBucket(ctx, spec, opts, objstore.Options{})
}

func openBucket(ctx context.Context, spec string, opts ReadOptions, oopts objstore.Options) (*FileReader, error) {
	if opts.MaxRecordBytes <= 0 {
		opts.MaxRecordBytes = DefaultMaxRecordBytes
	}
	dir, pattern := spec, ""
	if i := strings.LastIndex(spec, "/"); i > 0 && strings.ContainsAny(spec[i+1:], "*?[") {
		dir, pattern = spec[:i], spec[i+1:]
		if _, err := path.Match(pattern, ""); err != nil {
			return nil, fmt.Errorf("recording pattern %q: %w", pattern, err)
		}
	}
	b, err := objstore.OpenURI(ctx, dir, oopts)
	if err != nil {
		return nil, fmt.Errorf("open recording: %w", err)
	}
	loc := b.Location()
	var keys []string
	if pattern == "" && strings.HasSuffix(spec, ".jsonl") {
		if _, err := b.Attributes(ctx, ""); err != nil {
			_ = b.Close()
			return nil, fmt.Errorf("open recording: %w", err)
		}
		keys = []string{""}
	} else {
		err = b.List(ctx, "", func(o objstore.Object) error {
			if strings.Contains(o.Key, "/") || !strings.HasSuffix(o.Key, ".jsonl") {
				return nil
			}
			if pattern != "" {
				if ok, _ := path.Match(pattern, o.Key); !ok {
					return nil
				}
			}
			keys = append(keys, o.Key) // List returns keys in order
			return nil
		})
		if err == nil && len(keys) == 0 {
			err = fmt.Errorf("no *.jsonl recording objects in %s", spec)
		}
		if err != nil {
			_ = b.Close()
			return nil, fmt.Errorf("open recording: %w", err)
		}
	}
	names := make([]string, len(keys))
	byName := make(map[string]string, len(keys))
	for i, k := range keys {
		names[i] = loc.Join(k).String()
		byName[names[i]] = k
	}
	return &FileReader{
		files: names, opts: opts, idx: -1,
		open: func(name string) (io.ReadCloser, error) {
			k, ok := byName[name]
			if !ok {
				return nil, errors.New("unknown recording object " + name)
			}
			return b.NewReader(ctx, k, 0, -1)
		},
		release: b.Close,
	}, nil
}
