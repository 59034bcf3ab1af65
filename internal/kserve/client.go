package kserve

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/telemetry"
)

// Defaults for Options.
const (
	DefaultMaxMsgSize          = 64 << 20
	DefaultDialTimeout         = 2 * time.Second
	DefaultReconnectBackoffMax = 5 * time.Second
	DefaultKeepaliveTime       = 30 * time.Second
	DefaultKeepaliveTimeout    = 10 * time.Second
	DefaultUserAgent           = "sluice"
)

// Options configure a Client. Zero values take defaults.
type Options struct {
	// MaxMsgSize bounds request and response messages, in bytes; a larger
	// response fails with ResourceExhausted. Default DefaultMaxMsgSize.
	MaxMsgSize int
	// DialTimeout bounds one connection attempt (TCP connect plus the
	// HTTP/2 handshake), including the first. Default DefaultDialTimeout.
	DialTimeout time.Duration
	// ReconnectBackoffMax caps the wait between connection attempts to an
	// endpoint that keeps failing, and so how long a restarted server may
	// go unnoticed. Default DefaultReconnectBackoffMax.
	ReconnectBackoffMax time.Duration
	// KeepaliveTime: after this long without reading anything from a
	// connection that has calls in flight, the client pings the server,
	// so a silently dead peer is noticed. Idle connections are never
	// pinged: Triton's default policy disconnects clients that do.
	// Default DefaultKeepaliveTime; negative disables keepalive pings.
	// gRPC raises values under 10s to 10s.
	KeepaliveTime time.Duration
	// KeepaliveTimeout is how long a ping may go unanswered before the
	// connection is closed. Default DefaultKeepaliveTimeout.
	KeepaliveTimeout time.Duration
	// UserAgent is sent ahead of gRPC's own user agent. Default
	// DefaultUserAgent.
	UserAgent string
	// TLS, when set, makes every connection of the client TLS (mTLS when
	// it presents a client certificate); nil means plaintext HTTP/2
	// (h2c). An empty ServerName verifies the host of the endpoint
	// address. The client keeps a clone; build one Client per TLS
	// configuration (per backend).
	TLS *tls.Config
}

func (o *Options) setDefaults() {
	if o.MaxMsgSize <= 0 {
		o.MaxMsgSize = DefaultMaxMsgSize
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.ReconnectBackoffMax <= 0 {
		o.ReconnectBackoffMax = DefaultReconnectBackoffMax
	}
	if o.KeepaliveTime == 0 {
		o.KeepaliveTime = DefaultKeepaliveTime
	}
	if o.KeepaliveTimeout <= 0 {
		o.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
	if o.UserAgent == "" {
		o.UserAgent = DefaultUserAgent
	}
}

// ErrClosed is the domain error of a call made after Close; it is wrapped
// in an *RPCError with code Unavailable.
var ErrClosed = &apierr.Error{Kind: apierr.KindUnavailable, Reason: ReasonClientClosed, Msg: "kserve client is closed"}

// Client calls KServe v2 gRPC servers: Sluice model servers or Triton. It
// holds one connection per endpoint address, created on the first call and
// reused by all later ones (HTTP/2 multiplexes them). It is safe for
// concurrent use.
//
// Calls never wait for a connection that is down: a call to an endpoint
// that refuses connections, or is in backoff after failing to connect,
// fails at once with Unavailable and IsConnectFailure true, while the
// connection keeps retrying in the background.
type Client struct {
	opts     Options
	logger   *slog.Logger
	dialOpts []grpc.DialOption

	mu     sync.RWMutex // protects conns and closed
	conns  map[string]*grpc.ClientConn
	closed bool
}

// New returns a Client. A nil logger discards logs.
func New(opts Options, logger *slog.Logger) *Client {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	opts.setDefaults()
	// Plaintext by default: loopback or in-cluster traffic, where TLS may
	// belong to a mesh. A server certificate that fails verification
	// (unknown CA, wrong name) is a connect failure like a refused
	// connection: the call never reached the server.
	creds := insecure.NewCredentials()
	if opts.TLS != nil {
		creds = credentials.NewTLS(opts.TLS)
	}
	dialOpts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithUserAgent(opts.UserAgent),
		// The gateway runs its own retry policy (Envoy's semantics, across
		// endpoints); gRPC's would also buffer every request until it
		// commits. Transparent retries of calls that never reached the
		// server still happen.
		grpc.WithDisableRetry(),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(opts.MaxMsgSize),
			grpc.MaxCallSendMsgSize(opts.MaxMsgSize),
			// Fail fast on a dead endpoint: the gateway retries elsewhere.
			grpc.WaitForReady(false),
		),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  100 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   opts.ReconnectBackoffMax,
			},
			MinConnectTimeout: opts.DialTimeout,
		}),
	}
	if opts.KeepaliveTime > 0 {
		dialOpts = append(dialOpts, grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                opts.KeepaliveTime,
			Timeout:             opts.KeepaliveTimeout,
			PermitWithoutStream: false,
		}))
	}
	return &Client{
		opts:     opts,
		logger:   logger.With("component", "kserve"),
		dialOpts: dialOpts,
		conns:    make(map[string]*grpc.ClientConn),
	}
}

// conn returns the connection to addr, creating it if needed. Creating a
// connection does not dial; the first call does.
func (c *Client) conn(addr, method string) (*grpc.ClientConn, error) {
	c.mu.RLock()
	cc, ok := c.conns[addr]
	closed := c.closed
	c.mu.RUnlock()
	if ok {
		return cc, nil
	}
	if closed {
		return nil, localError(addr, method, codes.Unavailable, ErrClosed)
	}
	if addr == "" {
		return nil, localError(addr, method, codes.Unavailable,
			apierr.Errorf(apierr.KindUnavailable, ReasonBadAddress, "endpoint address is empty"))
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, localError(addr, method, codes.Unavailable, ErrClosed)
	}
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, c.dialOpts...)
	if err != nil {
		return nil, localError(addr, method, codes.Unavailable, &apierr.Error{
			Kind: apierr.KindUnavailable, Reason: ReasonBadAddress, Msg: "invalid endpoint address", Err: err,
		})
	}
	c.conns[addr] = cc
	c.logger.Debug("endpoint connection created", "addr", addr)
	return cc, nil
}

// Forget closes the connection to addr, if any; a later call to addr opens
// a new one. Calls in flight on the old connection fail with Canceled. Use
// it for endpoints removed by a configuration reload.
func (c *Client) Forget(addr string) {
	c.mu.Lock()
	cc, ok := c.conns[addr]
	delete(c.conns, addr)
	c.mu.Unlock()
	if ok {
		if err := cc.Close(); err != nil {
			c.logger.Debug("endpoint connection close", "addr", addr, "err", err)
		}
		c.logger.Debug("endpoint connection closed", "addr", addr)
	}
}

// Close closes every connection; later calls fail with ErrClosed (inside
// an *RPCError with code Unavailable) and calls in flight fail with
// Canceled. It is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	conns := c.conns
	c.conns = make(map[string]*grpc.ClientConn)
	c.closed = true
	c.mu.Unlock()
	var errs []error
	for _, cc := range conns {
		if err := cc.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// call is the per-call state kept in a pool, so that learning whether a
// connection carried the request (grpc.Peer) and encoding the request cost
// no allocations.
type call struct {
	peer peer.Peer
	opts [1]grpc.CallOption // grpc.Peer(&peer)
	req  reqBuf
	resp pb.ModelInferResponse
}

var callPool = sync.Pool{New: func() any {
	cl := &call{}
	cl.opts[0] = grpc.Peer(&cl.peer)
	return cl
}}

func getCall() *call { return callPool.Get().(*call) }

func putCall(cl *call) {
	cl.peer = peer.Peer{}
	cl.req.reset()
	cl.resp = pb.ModelInferResponse{}
	callPool.Put(cl)
}

// invoke runs one unary RPC and turns its failure into an *RPCError.
func (c *Client) invoke(ctx context.Context, addr, method, fullMethod string, req, reply proto.Message, cl *call) error {
	cc, err := c.conn(addr, method)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		// Not a connect failure: the endpoint was never tried.
		return newRPCError(addr, method, status.FromContextError(err), false)
	}
	err = cc.Invoke(ctx, fullMethod, req, reply, cl.opts[:]...)
	if err == nil {
		return nil
	}
	st := status.Convert(err)
	// grpc.Peer is filled in only once a connection has taken the call's
	// stream. Without one, the call failed while waiting for a connection:
	// refused, handshake failed or timed out, or the endpoint in backoff.
	sent := cl.peer.Addr != nil
	code := st.Code()
	connectFailure := !sent && (code == codes.Unavailable || code == codes.DeadlineExceeded)
	return newRPCError(addr, method, st, connectFailure)
}

// Infer runs req on the model server at addr (host:port). The request
// travels in raw_input_contents; the response may use raw or typed
// contents and is checked (see DecodeResponse). Errors are *RPCError;
// the returned tensors are the caller's.
func (c *Client) Infer(ctx context.Context, addr string, req *infer.Request) (*infer.Response, error) {
	const method = "ModelInfer"
	cl := getCall()
	defer putCall(cl)
	msg := cl.req.encode(req)
	ctx = telemetry.InjectGRPC(ctx)
	if err := c.invoke(ctx, addr, method, pb.GRPCInferenceService_ModelInfer_FullMethodName, msg, &cl.resp, cl); err != nil {
		return nil, err
	}
	// The decoded tensors alias slices that the unmarshaling allocated for
	// this call only, so cl.resp may be reset and reused afterwards.
	resp, err := DecodeResponse(&cl.resp)
	if err != nil {
		var ie *apierr.Error
		if !errors.As(err, &ie) {
			ie = &apierr.Error{Kind: apierr.KindInternal, Reason: ReasonBadResponse, Msg: "invalid response", Err: err}
		}
		return nil, localError(addr, method, codes.Internal, ie)
	}
	return resp, nil
}

// ServerReady asks the server at addr whether it is ready for inference
// (KServe v2 ServerReady). Errors are *RPCError.
func (c *Client) ServerReady(ctx context.Context, addr string) (bool, error) {
	cl := getCall()
	defer putCall(cl)
	var resp pb.ServerReadyResponse
	if err := c.invoke(ctx, addr, "ServerReady", pb.GRPCInferenceService_ServerReady_FullMethodName,
		&pb.ServerReadyRequest{}, &resp, cl); err != nil {
		return false, err
	}
	return resp.GetReady(), nil
}

// ModelReady asks the server at addr whether a model version is ready;
// version "" means the server's choice (the latest). An unknown model is
// not ready (Sluice) or an error (some servers); callers should treat both
// as not ready. Errors are *RPCError.
func (c *Client) ModelReady(ctx context.Context, addr, model, version string) (bool, error) {
	cl := getCall()
	defer putCall(cl)
	var resp pb.ModelReadyResponse
	if err := c.invoke(ctx, addr, "ModelReady", pb.GRPCInferenceService_ModelReady_FullMethodName,
		&pb.ModelReadyRequest{Name: model, Version: version}, &resp, cl); err != nil {
		return false, err
	}
	return resp.GetReady(), nil
}

// Metadata is a model's KServe v2 metadata as a server reports it.
type Metadata struct {
	Name     string
	Versions []string
	Platform string
	// Inputs and Outputs are in the model's order; -1 marks a variable
	// dimension.
	Inputs  []infer.TensorSpec
	Outputs []infer.TensorSpec
}

// ModelMetadata fetches a model's metadata from the server at addr;
// version "" means the server's choice. A tensor with an unknown datatype
// or a shape with dimensions below -1 makes it fail with
// ReasonBadResponse. Errors are *RPCError.
func (c *Client) ModelMetadata(ctx context.Context, addr, model, version string) (*Metadata, error) {
	const method = "ModelMetadata"
	cl := getCall()
	defer putCall(cl)
	var resp pb.ModelMetadataResponse
	if err := c.invoke(ctx, addr, method, pb.GRPCInferenceService_ModelMetadata_FullMethodName,
		&pb.ModelMetadataRequest{Name: model, Version: version}, &resp, cl); err != nil {
		return nil, err
	}
	md := &Metadata{Name: resp.GetName(), Versions: resp.GetVersions(), Platform: resp.GetPlatform()}
	var bad *apierr.Error // not error: a nil *apierr.Error must stay nil
	if md.Inputs, bad = tensorSpecs("input", resp.GetInputs()); bad != nil {
		return nil, localError(addr, method, codes.Internal, bad)
	}
	if md.Outputs, bad = tensorSpecs("output", resp.GetOutputs()); bad != nil {
		return nil, localError(addr, method, codes.Internal, bad)
	}
	return md, nil
}

// tensorSpecs converts metadata tensors; what is "input" or "output".
func tensorSpecs(what string, in []*pb.ModelMetadataResponse_TensorMetadata) ([]infer.TensorSpec, *apierr.Error) {
	out := make([]infer.TensorSpec, len(in))
	for i, t := range in {
		dt, ok := infer.ParseDataType(t.GetDatatype())
		if !ok {
			return nil, badResponsef("%s '%s': unknown datatype %q", what, t.GetName(), t.GetDatatype())
		}
		for _, d := range t.GetShape() {
			if d < -1 {
				return nil, badResponsef("%s '%s': shape %s has a dimension below -1", what, t.GetName(),
					infer.Shape(t.GetShape()).String())
			}
		}
		out[i] = infer.TensorSpec{Name: t.GetName(), DataType: dt, Shape: t.GetShape()}
	}
	return out, nil
}
