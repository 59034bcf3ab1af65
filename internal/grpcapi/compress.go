package grpcapi

import (
	"context"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"

	// Imported so that its init, which registers grpc-go's own gzip, runs
	// before this package's, which replaces it (a dependency of the
	// binary imports it anyway).
	_ "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-ml/sluice/internal/zpool"
)

// Triton's gRPC endpoint accepts the message compression its clients
// offer (tritonclient's compression_algorithm: "deflate" or "gzip") and
// answers in the algorithm the request used. Both are registered here
// with pooled compressors at the fastest level (internal/zpool), replacing
// grpc-go's own gzip (the standard library's, at its default level);
// deflate is gRPC core's zlib-wrapped deflate. The service answers a
// message smaller than its CompressMinBytes uncompressed (plainIfSmall),
// as the HTTP endpoint does.
func init() {
	encoding.RegisterCompressor(compressor{name: "gzip"})
	encoding.RegisterCompressor(compressor{name: "deflate"})
}

type compressor struct{ name string }

func (c compressor) Name() string { return c.name }

// Compress returns a pooled writer; its Close returns it to the pool.
func (c compressor) Compress(w io.Writer) (io.WriteCloser, error) {
	return &pooledWriter{Writer: zpool.Get(c.name, w)}, nil
}

// Decompress reads a gzip or zlib stream; grpc-go bounds what it reads by
// the server's maximum message size.
func (c compressor) Decompress(r io.Reader) (io.Reader, error) {
	if c.name == "gzip" {
		return gzip.NewReader(r)
	}
	return zlib.NewReader(r)
}

type pooledWriter struct{ zpool.Writer }

func (p *pooledWriter) Close() error {
	err := p.Writer.Close()
	zpool.Put(p.Writer)
	p.Writer = nil
	return err
}

// plainIfSmall makes the call answer uncompressed when the client
// compressed its request (grpc-go then answers in the same algorithm) but
// the response, msg, is smaller than minBytes (see zpool.ShouldCompress).
// Only the first message of a stream can change it: the compression is
// named in the response headers.
func plainIfSmall(ctx context.Context, msg proto.Message, minBytes int) {
	st, ok := grpc.ServerTransportStreamFromContext(ctx).(interface{ SendCompress() string })
	if !ok {
		return
	}
	if c := st.SendCompress(); c == "" || c == encoding.Identity {
		return
	}
	if !zpool.ShouldCompress(proto.Size(msg), minBytes) {
		_ = grpc.SetSendCompressor(ctx, encoding.Identity) // fails only once headers went out
	}
}
