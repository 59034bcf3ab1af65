// Package zpool holds the response compressors of the KServe edges: gzip
// and HTTP's "deflate" (the zlib format), at the fastest level, from
// pools, so that a compressed response allocates nothing of its own.
//
// Why these choices (measured with BenchmarkCompress in this package's
// tests on parcel_eta-like JSON; docs/model-server.md has the table):
// a new compress/gzip writer per response allocates about 800 KB (its
// window and hash tables) and made the collector and compress/flate most
// of the server's CPU (issue 23). Pooled, the standard library's writer at
// its default level still spent 3 to 5 times what github.com/klauspost/
// compress's gzip writer at BestSpeed spends per response, from 214-byte
// to 256 KiB bodies, for output within 2 % of the same size; klauspost's
// was the fastest at every size measured, so both encodings use it.
package zpool

import (
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"

	"github.com/sluice-ml/sluice/internal/config"
)

// DefaultMinBytes is the smallest response body compressed unless a
// server's setting says otherwise: config's (the default of
// --compress-min-bytes and model_server.compress_min_bytes), where the
// reason for its size is written.
const DefaultMinBytes = config.DefaultCompressMinBytes

// Level is the compression level of both encodings: the fastest.
const Level = gzip.BestSpeed

// Writer is a pooled compressor. Close finishes the stream; Put returns
// the writer to its pool afterwards.
type Writer interface {
	io.WriteCloser
	Reset(w io.Writer)
}

var gzipPool, zlibPool sync.Pool

// Get returns a writer for enc ("gzip" or "deflate") writing to w, from
// the pool when it has one. Any other enc is a bug in the caller and
// panics.
func Get(enc string, w io.Writer) Writer {
	switch enc {
	case "gzip":
		if zw, ok := gzipPool.Get().(*gzip.Writer); ok {
			zw.Reset(w)
			return zw
		}
		zw, _ := gzip.NewWriterLevel(w, Level) // Level is valid
		return zw
	case "deflate":
		if zw, ok := zlibPool.Get().(*zlib.Writer); ok {
			zw.Reset(w)
			return zw
		}
		zw, _ := zlib.NewWriterLevel(w, Level)
		return zw
	}
	panic("zpool: unknown encoding " + enc)
}

// Put returns a writer that Get gave, once it is closed (or abandoned).
// It drops the writer's reference to its destination first.
func Put(zw Writer) {
	zw.Reset(io.Discard)
	switch zw := zw.(type) {
	case *gzip.Writer:
		gzipPool.Put(zw)
	case *zlib.Writer:
		zlibPool.Put(zw)
	}
}

// ShouldCompress reports whether a body of n bytes is compressed under a
// minimum of minBytes: 0 means DefaultMinBytes, a negative minimum never
// compresses.
func ShouldCompress(n, minBytes int) bool {
	if minBytes == 0 {
		minBytes = DefaultMinBytes
	}
	return minBytes > 0 && n >= minBytes
}
