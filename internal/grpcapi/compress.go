package grpcapi

import (
	"compress/zlib"
	"io"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/gzip" // registers gzip, which Triton's clients may ask for
)

// Triton's gRPC endpoint accepts the message compression its clients
// offer (tritonclient's compression_algorithm: "deflate" or "gzip").
// grpc-go ships gzip; deflate is gRPC core's zlib-wrapped deflate,
// registered here. The server answers in the algorithm the request used.
func init() { encoding.RegisterCompressor(deflate{}) }

type deflate struct{}

func (deflate) Name() string { return "deflate" }

func (deflate) Compress(w io.Writer) (io.WriteCloser, error) { return zlib.NewWriter(w), nil }

// Decompress reads a zlib stream; grpc-go bounds what it reads by the
// server's maximum message size.
func (deflate) Decompress(r io.Reader) (io.Reader, error) { return zlib.NewReader(r) }
