package grpcapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-ml/sluice/internal/admission"
	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelconfig"
	"github.com/sluice-ml/sluice/internal/modelrepo"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/shm"
	"github.com/sluice-ml/sluice/internal/tritonsettings"
)

// DefaultExtensions are the Triton protocol extensions Sluice serves; they
// are listed in ServerMetadata. As in Triton, the list is the server's, the
// same on both protocols: binary_tensor_data is served on HTTP. "sequence"
// is served by the sequence batcher. cuda_shared_memory is not listed:
// every call of it is refused (no GPU).
var DefaultExtensions = []string{
	"classification",
	"sequence",
	"system_shared_memory",
	"model_repository",
	"model_configuration",
	"statistics",
	"binary_tensor_data",
	"schedule_policy",
	"parameters",
}

// Options configure a Service. Zero values take defaults.
type Options struct {
	// ServerName is reported by ServerMetadata; default "sluice".
	ServerName string
	// ServerVersion is reported by ServerMetadata.
	ServerVersion string
	// Extensions are reported by ServerMetadata; default DefaultExtensions.
	Extensions []string
	// SharedMemory holds the system shared-memory regions clients
	// register; nil: a private registry.
	SharedMemory *shm.Registry
	// Settings back Triton's logging and trace extensions (LogSettings,
	// TraceSetting); nil: those RPCs answer Unimplemented.
	Settings *tritonsettings.Settings
	// HeaderForward, when set, forwards the request metadata whose keys
	// it matches as string request parameters named by the key (Triton's
	// --grpc-header-forward-pattern). A parameter the request sets wins.
	HeaderForward *regexp.Regexp
	// CompressMinBytes is the smallest response message compressed when
	// the client compressed its request; smaller ones are answered
	// uncompressed. 0: zpool.DefaultMinBytes (1 KiB); negative: never.
	CompressMinBytes int
}

// Service implements inference.GRPCInferenceService on top of
// modelrepo.Models. The CUDA shared-memory RPCs answer Unimplemented.
type Service struct {
	pb.UnimplementedGRPCInferenceServiceServer

	models  modelrepo.Models
	opts    Options
	logger  *slog.Logger
	metrics *metrics

	closeOnce sync.Once
	closed    chan struct{} // closed by Shutdown
}

// New returns a Service. A nil logger discards logs; a nil registerer
// leaves the metrics unregistered.
func New(models modelrepo.Models, opts Options, logger *slog.Logger, reg prometheus.Registerer) *Service {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.ServerName == "" {
		opts.ServerName = "sluice"
	}
	if opts.Extensions == nil {
		opts.Extensions = DefaultExtensions
		if opts.Settings != nil {
			opts.Extensions = append(slices.Clone(DefaultExtensions), "logging", "trace")
		}
	}
	if opts.SharedMemory == nil {
		opts.SharedMemory = shm.New(shm.Options{})
	}
	return &Service{
		models:  models,
		opts:    opts,
		logger:  logger.With("component", "grpcapi"),
		metrics: newMetrics(reg),
		closed:  make(chan struct{}),
	}
}

// Shutdown makes the health service report NOT_SERVING and ends health
// Watch streams, so a graceful stop of the gRPC server is not held up by
// them. Call it first when shutting down; it is idempotent.
func (s *Service) Shutdown() {
	s.closeOnce.Do(func() { close(s.closed) })
}

func (s *Service) shuttingDown() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// ServerLive implements the KServe v2 ServerLive RPC.
func (s *Service) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: s.models.Live()}, nil
}

// ServerReady implements the KServe v2 ServerReady RPC.
func (s *Service) ServerReady(context.Context, *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return &pb.ServerReadyResponse{Ready: s.ready()}, nil
}

func (s *Service) ready() bool { return !s.shuttingDown() && s.models.Ready() }

// ModelReady implements the KServe v2 ModelReady RPC. Like Triton, an
// unknown or unavailable model is reported as not ready rather than as an
// error.
func (s *Service) ModelReady(ctx context.Context, req *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	if req.GetName() == "" {
		return nil, toStatus(invalidf(reasonMissingModelName, "model name is empty"))
	}
	err := s.models.ModelReady(ctx, req.GetName(), req.GetVersion())
	if err == nil {
		return &pb.ModelReadyResponse{Ready: true}, nil
	}
	var ie *apierr.Error
	if errors.As(err, &ie) && (ie.Kind == apierr.KindNotFound || ie.Kind == apierr.KindUnavailable) {
		return &pb.ModelReadyResponse{Ready: false}, nil
	}
	return nil, s.fail(ctx, "ModelReady", err)
}

// ServerMetadata implements the KServe v2 ServerMetadata RPC.
func (s *Service) ServerMetadata(context.Context, *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	return &pb.ServerMetadataResponse{
		Name:       s.opts.ServerName,
		Version:    s.opts.ServerVersion,
		Extensions: append([]string(nil), s.opts.Extensions...),
	}, nil
}

// ModelMetadata implements the KServe v2 ModelMetadata RPC.
func (s *Service) ModelMetadata(ctx context.Context, req *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	if req.GetName() == "" {
		return nil, toStatus(invalidf(reasonMissingModelName, "model name is empty"))
	}
	md, err := s.models.Metadata(ctx, req.GetName(), req.GetVersion())
	if err != nil {
		return nil, s.fail(ctx, "ModelMetadata", err)
	}
	return &pb.ModelMetadataResponse{
		Name:     md.Name,
		Versions: md.Versions,
		Platform: md.Platform,
		Inputs:   tensorMetadata(md.Inputs),
		Outputs:  tensorMetadata(md.Outputs),
	}, nil
}

func tensorMetadata(specs []modelrepo.TensorMeta) []*pb.ModelMetadataResponse_TensorMetadata {
	out := make([]*pb.ModelMetadataResponse_TensorMetadata, len(specs))
	for i, sp := range specs {
		out[i] = &pb.ModelMetadataResponse_TensorMetadata{
			Name:     sp.Name,
			Datatype: sp.DataType.String(),
			Shape:    sp.Shape.Clone(),
		}
	}
	return out
}

// ModelInfer implements the KServe v2 ModelInfer RPC.
func (s *Service) ModelInfer(ctx context.Context, req *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	resp, err := s.infer(ctx, req)
	if err == nil {
		// The response is charged to the in-flight budget before grpc-go
		// marshals it, and held until the call ends: a model's output can
		// be far larger than its request (issue 22).
		err = admission.ChargeResponse(ctx, responseBytes(ctx, resp))
	}
	if err != nil {
		return nil, s.fail(ctx, "ModelInfer", err)
	}
	plainIfSmall(ctx, resp, s.opts.CompressMinBytes)
	return resp, nil
}

// responseBytes is what a response message holds while it is sent: the
// outputs it refers to, the marshalled message and, when the call is
// compressed, the compressed copy (never much larger than its input).
func responseBytes(ctx context.Context, msg proto.Message) int64 {
	size := int64(proto.Size(msg))
	n := 2 * size
	if st, ok := grpc.ServerTransportStreamFromContext(ctx).(interface{ SendCompress() string }); ok {
		if c := st.SendCompress(); c != "" && c != encoding.Identity {
			n += size + size/8
		}
	}
	return n
}

func (s *Service) infer(ctx context.Context, req *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	var out *pb.ModelInferResponse
	err := s.inferWith(ctx, req, func(ir *infer.Request, fill func(*infer.Response) (*pb.ModelInferResponse, error)) error {
		resp, err := s.models.Infer(ctx, ir)
		if err != nil {
			return err
		}
		out, err = fill(resp)
		return err
	})
	return out, err
}

// inferWith decodes a request (shared-memory inputs read) and runs it with
// run, which answers through fill: the response encoded, its
// shared-memory outputs written.
func (s *Service) inferWith(ctx context.Context, req *pb.ModelInferRequest, run func(*infer.Request, func(*infer.Response) (*pb.ModelInferResponse, error)) error) error {
	ir, err := DecodeInferRequest(req)
	if err != nil {
		return err
	}
	if s.opts.HeaderForward != nil {
		if err := forwardMetadata(ctx, ir, s.opts.HeaderForward); err != nil {
			return err
		}
	}
	// The regions the request names stay registered until it is
	// answered, even when unregistered meanwhile, as in Triton.
	lease, err := s.opts.SharedMemory.Acquire(ir)
	if err != nil {
		return err
	}
	defer lease.Release()
	return run(ir, func(resp *infer.Response) (*pb.ModelInferResponse, error) {
		if err := lease.WriteOutputs(resp); err != nil {
			return nil, err
		}
		if resp.ID == "" {
			resp.ID = ir.ID
		}
		if resp.Model == "" {
			resp.Model = ir.Model
		}
		return EncodeInferResponse(resp), nil
	})
}

// streamWindow bounds the requests of one stream in flight at once; past
// it the stream reads no more until the oldest is answered (HTTP/2 flow
// control then holds the client back).
const streamWindow = 64

// ModelStreamInfer implements Triton's bidirectional streaming inference.
// Requests run concurrently, as in Triton, so that a client can queue
// several requests of a sequence (or of several sequences) on one stream
// and the batchers can batch them; they are answered in the order they
// arrived. Each request is passed on only after the one before it from
// this stream reached its scheduler's queue (or was answered), so a
// stream's requests are queued, and batched, in stream order: a
// sequence's requests keep their order (qa/L0_sequence_batcher
// test_full_batch queues twelve requests from four streams before any
// runs) and a dynamic batch holds them as sent (qa/L0_batch_input
// test_accumulated_element_count). A failed request yields a response
// with error_message set and the stream stays open.
func (s *Service) ModelStreamInfer(stream pb.GRPCInferenceService_ModelStreamInferServer) error {
	ctx := stream.Context()
	pending := make(chan chan *pb.ModelStreamInferResponse, streamWindow)
	sent := make(chan error, 1)
	go func() { // answers in arrival order; a request's responses in order
		var err error
		first := true
		for ch := range pending {
			for msg := range ch {
				if err != nil {
					continue
				}
				if first {
					plainIfSmall(ctx, msg, s.opts.CompressMinBytes)
					first = false
				}
				err = s.sendCharged(stream, msg)
			}
		}
		sent <- err
	}()
	for {
		req, err := stream.Recv()
		if err != nil {
			close(pending)
			sendErr := <-sent
			if errors.Is(err, io.EOF) {
				return sendErr
			}
			return err
		}
		// A decoupled model's responses wait here while an earlier
		// request of the stream is still answering.
		ch := make(chan *pb.ModelStreamInferResponse, streamWindow)
		pending <- ch
		queued := make(chan struct{})
		var once sync.Once
		rctx := infer.WithQueued(ctx, func() { once.Do(func() { close(queued) }) })
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer close(ch)
			s.streamAnswer(rctx, req, ch)
		}()
		select {
		case <-queued:
		case <-done:
		}
	}
}

// sendCharged sends one answer of a stream, charged to the in-flight
// budget until it is sent (issue 22); an answer the budget refuses is
// replaced by an error answer naming why, and the stream goes on.
func (s *Service) sendCharged(stream pb.GRPCInferenceService_ModelStreamInferServer, msg *pb.ModelStreamInferResponse) error {
	ctx := stream.Context()
	release, err := admission.ReserveStreamResponse(ctx, responseBytes(ctx, msg))
	if err != nil {
		r := msg.GetInferResponse()
		msg = &pb.ModelStreamInferResponse{
			ErrorMessage:  err.Error(),
			InferResponse: &pb.ModelInferResponse{ModelName: r.GetModelName(), ModelVersion: r.GetModelVersion(), Id: r.GetId(), Parameters: r.GetParameters()},
		}
		return stream.Send(msg)
	}
	defer release()
	return stream.Send(msg)
}

// paramEmptyFinal is the request parameter that asks for an empty
// response carrying triton_final_response when a decoupled model sends
// the final flag without a response.
const paramEmptyFinal = "triton_enable_empty_final_response"

// streamAnswer runs one request of a stream and sends its answers to out:
// one response, or a decoupled model's responses (each with
// triton_final_response; an error response as error_message, the stream
// going on).
func (s *Service) streamAnswer(ctx context.Context, req *pb.ModelInferRequest, out chan<- *pb.ModelStreamInferResponse) {
	failed := func(err error) *pb.ModelStreamInferResponse {
		if ctx.Err() == nil {
			s.logInternal(ctx, "ModelStreamInfer", err)
		}
		return &pb.ModelStreamInferResponse{
			ErrorMessage: err.Error(),
			InferResponse: &pb.ModelInferResponse{
				ModelName:    req.GetModelName(),
				ModelVersion: req.GetModelVersion(),
				Id:           req.GetId(),
			},
		}
	}
	// The stream consumes its own parameter, as Triton's stream handler
	// does; anywhere else a triton_ key is refused as reserved.
	emptyFinal := req.GetParameters()[paramEmptyFinal].GetBoolParam()
	delete(req.Parameters, paramEmptyFinal)
	st, ok := s.models.(modelrepo.Streamer)
	if !ok {
		resp, err := s.infer(ctx, req)
		if err != nil {
			out <- failed(err)
			return
		}
		out <- &pb.ModelStreamInferResponse{InferResponse: resp}
		return
	}
	err := s.inferWith(ctx, req, func(ir *infer.Request, fill func(*infer.Response) (*pb.ModelInferResponse, error)) error {
		return st.InferStream(ctx, ir, func(resp *infer.Response, err error, final bool) error {
			var msg *pb.ModelStreamInferResponse
			switch {
			case err != nil:
				msg = failed(err)
				if final {
					msg.InferResponse.Parameters = map[string]*pb.InferParameter{
						modelrepo.ParamFinalResponse: {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}},
					}
				}
			case resp != nil:
				r, err := fill(resp)
				if err != nil {
					msg = failed(err)
				} else {
					msg = &pb.ModelStreamInferResponse{InferResponse: r}
				}
			case emptyFinal:
				msg = &pb.ModelStreamInferResponse{InferResponse: &pb.ModelInferResponse{
					ModelName:    req.GetModelName(),
					ModelVersion: req.GetModelVersion(),
					Id:           req.GetId(),
					Parameters: map[string]*pb.InferParameter{
						modelrepo.ParamFinalResponse: {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}},
					},
				}}
			default:
				return nil // the flag alone, and the client did not ask for it
			}
			select {
			case out <- msg:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
	})
	if err != nil {
		out <- failed(err)
	}
}

// ModelConfig implements Triton's model_configuration extension.
func (s *Service) ModelConfig(ctx context.Context, req *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
	if req.GetName() == "" {
		return nil, toStatus(invalidf(reasonMissingModelName, "model name is empty"))
	}
	cfg, err := s.models.Config(ctx, req.GetName(), req.GetVersion())
	if err != nil {
		return nil, s.fail(ctx, "ModelConfig", err)
	}
	return &pb.ModelConfigResponse{Config: cfg}, nil
}

// ModelStatistics implements Triton's statistics extension.
func (s *Service) ModelStatistics(ctx context.Context, req *pb.ModelStatisticsRequest) (*pb.ModelStatisticsResponse, error) {
	stats, err := s.models.Statistics(ctx, req.GetName(), req.GetVersion())
	if err != nil {
		return nil, s.fail(ctx, "ModelStatistics", err)
	}
	out := &pb.ModelStatisticsResponse{ModelStats: make([]*pb.ModelStatistics, len(stats))}
	for i := range stats {
		out.ModelStats[i] = encodeStats(&stats[i])
	}
	return out, nil
}

func duration(d modelrepo.Duration) *pb.StatisticDuration {
	return &pb.StatisticDuration{Count: d.Count, Ns: d.Ns}
}

func encodeStats(st *modelrepo.ModelStats) *pb.ModelStatistics {
	last := uint64(0)
	if st.LastInference > 0 {
		last = uint64(st.LastInference)
	}
	ms := &pb.ModelStatistics{
		Name:           st.Name,
		Version:        st.Version,
		LastInference:  last,
		InferenceCount: st.InferenceCount,
		ExecutionCount: st.ExecutionCount,
		InferenceStats: &pb.InferStatistics{
			Success:       duration(st.Success),
			Fail:          duration(st.Fail),
			Queue:         duration(st.Queue),
			ComputeInput:  duration(st.ComputeInput),
			ComputeInfer:  duration(st.ComputeInfer),
			ComputeOutput: duration(st.ComputeOutput),
			CacheHit:      duration(st.CacheHit),
			CacheMiss:     duration(st.CacheMiss),
		},
		BatchStats: make([]*pb.InferBatchStatistics, len(st.BatchStats)),
	}
	for i, b := range st.BatchStats {
		ms.BatchStats[i] = &pb.InferBatchStatistics{
			BatchSize:     b.BatchSize,
			ComputeInput:  duration(b.ComputeInput),
			ComputeInfer:  duration(b.ComputeInfer),
			ComputeOutput: duration(b.ComputeOutput),
		}
	}
	return ms
}

// RepositoryIndex implements Triton's model_repository index.
func (s *Service) RepositoryIndex(ctx context.Context, req *pb.RepositoryIndexRequest) (*pb.RepositoryIndexResponse, error) {
	if err := checkRepositoryName(req.GetRepositoryName()); err != nil {
		return nil, s.fail(ctx, "RepositoryIndex", err)
	}
	entries := s.models.Index(ctx, req.GetReady())
	out := &pb.RepositoryIndexResponse{Models: make([]*pb.RepositoryIndexResponse_ModelIndex, len(entries))}
	for i, e := range entries {
		out.Models[i] = &pb.RepositoryIndexResponse_ModelIndex{
			Name:    e.Name,
			Version: e.Version,
			State:   string(e.State),
			Reason:  e.Reason,
		}
	}
	return out, nil
}

// checkRepositoryName rejects a named repository: like Triton, Sluice
// serves its repositories as one and cannot address them one by one.
func checkRepositoryName(name string) error {
	if name != "" {
		return apierr.Errorf(apierr.KindUnsupported, reasonUnsupportedRepo,
			"repository_name %q: addressing one repository is not supported", name)
	}
	return nil
}

// The load parameters of Triton's model_repository extension.
const (
	loadParamConfig  = "config"
	loadParamFile    = "file:"
	unloadDependents = "unload_dependents"
)

// maxParamNameShown bounds how much of a client-chosen name goes into an
// error message.
const maxParamNameShown = 64

// RepositoryModelLoad implements Triton's model_repository load. The
// "config" parameter is a JSON ModelConfig that replaces the one on disk;
// "file:<version>/<name>" parameters carry file contents (bytes) and
// require "config".
func (s *Service) RepositoryModelLoad(ctx context.Context, req *pb.RepositoryModelLoadRequest) (*pb.RepositoryModelLoadResponse, error) {
	opts, err := decodeLoad(req)
	if err != nil {
		return nil, s.fail(ctx, "RepositoryModelLoad", err)
	}
	if err := s.models.Load(ctx, req.GetModelName(), opts); err != nil {
		return nil, s.fail(ctx, "RepositoryModelLoad", err)
	}
	return &pb.RepositoryModelLoadResponse{}, nil
}

func decodeLoad(req *pb.RepositoryModelLoadRequest) (modelrepo.LoadOptions, error) {
	var opts modelrepo.LoadOptions
	if err := checkRepositoryName(req.GetRepositoryName()); err != nil {
		return opts, err
	}
	name := req.GetModelName()
	if name == "" {
		return opts, invalidf(reasonMissingModelName, "model_name is empty")
	}
	for k, p := range req.GetParameters() {
		switch {
		case k == loadParamConfig:
			js, ok := p.GetParameterChoice().(*pb.ModelRepositoryParameter_StringParam)
			if !ok {
				return opts, invalidf(modelrepo.ReasonInvalidLoadRequest,
					"model '%s': load parameter 'config' must be a string_param holding JSON", name)
			}
			cfg, err := modelconfig.ParseJSON([]byte(js.StringParam))
			if err != nil {
				return opts, modelrepo.ConfigParamError(name, err)
			}
			opts.Config = cfg
		case strings.HasPrefix(k, loadParamFile):
			path := strings.TrimPrefix(k, loadParamFile)
			b, ok := p.GetParameterChoice().(*pb.ModelRepositoryParameter_BytesParam)
			if !ok {
				return opts, invalidf(modelrepo.ReasonInvalidLoadRequest,
					"model '%s': load parameter '%s' must be a bytes_param", name, shorten(k))
			}
			if opts.Files == nil {
				opts.Files = make(map[string][]byte)
			}
			opts.Files[path] = b.BytesParam
		}
	}
	// The checks are the HTTP edge's, so both take the same requests.
	return opts, opts.Check(name)
}

// shorten bounds a client-chosen string before it goes into a message.
func shorten(s string) string {
	if len(s) > maxParamNameShown {
		return s[:maxParamNameShown] + "..."
	}
	return s
}

// RepositoryModelUnload implements Triton's model_repository unload.
func (s *Service) RepositoryModelUnload(ctx context.Context, req *pb.RepositoryModelUnloadRequest) (*pb.RepositoryModelUnloadResponse, error) {
	if err := checkRepositoryName(req.GetRepositoryName()); err != nil {
		return nil, s.fail(ctx, "RepositoryModelUnload", err)
	}
	name := req.GetModelName()
	if name == "" {
		return nil, toStatus(invalidf(reasonMissingModelName, "model_name is empty"))
	}
	var opts modelrepo.UnloadOptions
	if p, ok := req.GetParameters()[unloadDependents]; ok {
		b, ok := p.GetParameterChoice().(*pb.ModelRepositoryParameter_BoolParam)
		if !ok {
			return nil, toStatus(invalidf(reasonInvalidParameter,
				"model '%s': unload parameter 'unload_dependents' must be a bool_param", name))
		}
		opts.UnloadDependents = b.BoolParam
	}
	if err := s.models.Unload(ctx, name, opts); err != nil {
		return nil, s.fail(ctx, "RepositoryModelUnload", err)
	}
	return &pb.RepositoryModelUnloadResponse{}, nil
}

// fail converts err to a status, logging errors that are the server's
// fault (the client sees only the status).
func (s *Service) fail(ctx context.Context, method string, err error) error {
	s.logInternal(ctx, method, err)
	return toStatus(err)
}

func (s *Service) logInternal(ctx context.Context, method string, err error) {
	if CodeOf(err) == codes.Internal {
		s.logger.ErrorContext(ctx, "request failed", "method", method, "err", err)
	}
}

// forwardMetadata adds the request metadata whose keys match re to the
// request parameters, as strings (several values joined by ","), unless
// the request set a parameter of that name. A matching key named as a
// parameter Triton reserves is refused, as Triton does.
func forwardMetadata(ctx context.Context, req *infer.Request, re *regexp.Regexp) error {
	md, _ := metadata.FromIncomingContext(ctx)
	for key, vals := range md {
		if strings.HasSuffix(key, "-bin") || !re.MatchString(key) {
			continue
		}
		if infer.ReservedParameter(key) {
			return infer.ReservedHeaderError(key)
		}
		if _, set := req.Parameters[key]; set {
			continue
		}
		if req.Parameters == nil {
			req.Parameters = infer.Parameters{}
		}
		req.Parameters[key] = strings.Join(vals, ",")
	}
	return nil
}
