// Package limitspec is how sluice.yaml writes a listener's request limits
// (Limits, with their defaults and checks) and the process's memory
// budget size. Package admission enforces them; package config embeds
// them. It imports only the standard library, so that config stays data;
// admission's documentation says why these values.
package limitspec

import (
	"errors"
	"fmt"
)

// DefaultBudgetBytes is the default process-wide budget of request bytes
// held in memory at once: 256 MiB, three requests of the largest default
// body limit (64 MiB) beside the small-request reserve.
const DefaultBudgetBytes = 256 << 20

// SmallBytes is the largest request that may use the budget's reserve:
// 1 MiB, the gateway's whole body limit and more than ordinary KServe and
// feature requests (a few KiB) carry.
const SmallBytes = 1 << 20

// BulkBytes is the part of a budget of maxBytes that large and
// unknown-length bodies may hold: all but the reserve, an eighth.
func BulkBytes(maxBytes int64) int64 { return maxBytes - maxBytes/8 }

// Defaults for a listener's limits; see package admission's documentation
// for why these values.
const (
	// DefaultMaxHeaderBytes bounds a request's header block: 64 KiB.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultMaxHeaderCount bounds the number of header fields: 100.
	DefaultMaxHeaderCount = 100
	// DefaultMaxConcurrentStreams bounds the concurrent streams of one
	// gRPC connection: 250, as net/http's HTTP/2 server does.
	DefaultMaxConcurrentStreams = 250
)

// Limits are one listener's request limits. A zero field means no limit
// to admission.Handler and gRPC's own default to
// admission.GRPCServerOptions (4 MiB messages);
// the configuration fills unset fields from DefaultLimits, and the
// process's Budget bounds the total whatever the limits say.
type Limits struct {
	// MaxBodyBytes bounds one request body in wire bytes (as sent, before
	// any decompression), whether it comes with a Content-Length or
	// chunked. Over it: 413 body_too_large. On gRPC listeners it is the
	// largest received message, compressed or not (ResourceExhausted).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxHeaderBytes bounds the request header block. The wiring copies it
	// to http.Server.MaxHeaderBytes (Go's server answers 431 beyond it);
	// on gRPC listeners it is the largest header list
	// (grpc.MaxHeaderListSize).
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxHeaderCount bounds the number of header fields (each value of a
	// repeated field counts). Over it: 431 too_many_headers.
	MaxHeaderCount int `yaml:"max_header_count"`
	// MaxConcurrentStreams bounds the concurrent streams of one gRPC
	// connection; 0 takes DefaultMaxConcurrentStreams. Unused by HTTP
	// listeners (http.Server's HTTP/2 default is the same 250).
	MaxConcurrentStreams uint32 `yaml:"max_concurrent_streams,omitempty"`
}

// DefaultLimits returns the default limits of a listener whose largest
// request body is maxBody bytes: DefaultMaxHeaderBytes and
// DefaultMaxHeaderCount.
func DefaultLimits(maxBody int64) Limits {
	return Limits{
		MaxBodyBytes:   maxBody,
		MaxHeaderBytes: DefaultMaxHeaderBytes,
		MaxHeaderCount: DefaultMaxHeaderCount,
	}
}

// Validate reports every problem with l at once. budgetBytes is the
// process's Budget size (<= 0: unlimited): a body limit larger than the
// budget, or than the part of it open to bodies over SmallBytes, would
// let a request through the limit that the budget can never admit, so
// every such request would be answered 503, which is a configuration
// mistake.
func (l Limits) Validate(budgetBytes int64) error {
	var errs []error
	if l.MaxBodyBytes < 0 {
		errs = append(errs, errors.New("max_body_bytes must not be negative"))
	}
	if l.MaxHeaderBytes < 0 {
		errs = append(errs, errors.New("max_header_bytes must not be negative"))
	}
	if l.MaxHeaderCount < 0 {
		errs = append(errs, errors.New("max_header_count must not be negative"))
	}
	if budgetBytes > 0 {
		switch room := BulkBytes(budgetBytes); {
		case l.MaxBodyBytes > budgetBytes:
			errs = append(errs, fmt.Errorf("max_body_bytes %d exceeds the memory budget of %d bytes: such a body could never be admitted", l.MaxBodyBytes, budgetBytes))
		case l.MaxBodyBytes > SmallBytes && l.MaxBodyBytes > room:
			errs = append(errs, fmt.Errorf("max_body_bytes %d exceeds the memory budget's %d bytes open to bodies over 1 MiB (the last eighth of %d is kept for small requests): such a body could never be admitted", l.MaxBodyBytes, room, budgetBytes))
		}
	}
	return errors.Join(errs...)
}
