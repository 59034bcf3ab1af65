package offline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/objstore"
)

// Remote reads: a Parquet object is read by ranged reads (objstore.ReaderAt),
// never downloaded whole. Each column parquet-go reads keeps a buffer of
// remoteBufferSize bytes, filled by one ranged read; footers and page
// headers go through a cache of remoteCacheBlocks blocks of remoteBlockSize
// bytes per open file. Memory per open file is therefore bounded by the
// number of columns read, not by the file's size.
const (
	remoteBlockSize   = 256 << 10
	remoteCacheBlocks = 16
	remoteBufferSize  = 256 << 10
)

// remoteGetenv reads the environment for object-storage credentials.
var remoteGetenv = os.Getenv

// dataFile is one Parquet file of a file source: on disk, or an object.
type dataFile struct {
	display string // the path as the source writes it, for errors
	path    string // on disk; "" for an object
	bucket  *objstore.Bucket
	key     string
	size    int64
}

// open opens the file for scanning.
func (f dataFile) open(ctx context.Context, specs []colSpec) (*fileScanner, error) {
	if f.bucket == nil {
		return openScanner(f.path, f.display, specs)
	}
	r := f.bucket.NewReaderAt(ctx, f.key, f.size, objstore.ReaderAtOptions{BlockSize: remoteBlockSize, Blocks: remoteCacheBlocks})
	return openScannerAt(r, nil, f.size, f.display, specs, remoteBufferSize)
}

// sourceData lists the Parquet files of a file source, on disk
// (sourceFiles) or in a bucket. release closes the bucket's client; call
// it once the files are read.
//
// In a bucket, a path names one object, or a folder: the .parquet objects
// directly under it, in key order. A folder with no objects lists nothing
// (buckets have no empty folders), which readers take as "no rows yet"; a
// path ending in .parquet that names no object is an error.
func sourceData(ctx context.Context, dir string, src *feature.Source) (files []dataFile, release func(), err error) {
	release = func() {}
	if !objstore.IsURI(src.Path) {
		full, display, err := sourceFiles(dir, src.Path)
		if err != nil {
			return nil, release, err
		}
		for i, p := range full {
			files = append(files, dataFile{display: display[i], path: p})
		}
		return files, release, nil
	}
	loc, err := registry.SourceLocation(src.Path, src.S3EndpointOverride)
	if err != nil {
		return nil, release, fmt.Errorf("source %s: %w", src.Name, err)
	}
	creds, err := objstore.ResolveCredentials(loc, remoteGetenv)
	if err != nil {
		return nil, release, fmt.Errorf("source %s: %w", src.Name, err)
	}
	b, err := objstore.Open(ctx, loc, creds, objstore.Options{Getenv: remoteGetenv})
	if err != nil {
		return nil, release, fmt.Errorf("source %s: %w", src.Name, err)
	}
	release = func() { _ = b.Close() } // read-only client: nothing to lose on close
	base := strings.TrimSuffix(src.Path, "/")
	if loc.Prefix != "" && !strings.HasSuffix(src.Path, "/") {
		a, err := b.Attributes(ctx, "")
		switch {
		case err == nil:
			return []dataFile{{display: src.Path, bucket: b, key: "", size: a.Size}}, release, nil
		case !errors.Is(err, objstore.ErrNotExist) || strings.HasSuffix(src.Path, ".parquet"):
			release()
			return nil, func() {}, fmt.Errorf("source %s: %w", src.Name, err)
		}
	}
	err = b.List(ctx, "", func(o objstore.Object) error {
		if strings.Contains(o.Key, "/") || !strings.HasSuffix(o.Key, ".parquet") {
			return nil
		}
		files = append(files, dataFile{display: base + "/" + o.Key, bucket: b, key: o.Key, size: o.Size})
		return nil
	})
	if err != nil {
		release()
		return nil, func() {}, fmt.Errorf("source %s: %w", src.Name, err)
	}
	return files, release, nil
}
