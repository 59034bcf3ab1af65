package gateway_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/gateway/auth"
	"github.com/sluice-ml/sluice/internal/kserve"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
	"github.com/sluice-ml/sluice/internal/testutil/tlsrun"
	"github.com/sluice-ml/sluice/internal/tlsconfig"
)

// tlsModels is a KServe v2 gRPC model server that answers every
// ModelInfer with eta_prediction 42 and confidence_score 0.9, and sends
// each call's client identity (mTLS) to ids.
type tlsModels struct {
	pb.UnimplementedGRPCInferenceServiceServer
	ids chan string
}

func (s *tlsModels) ServerReady(context.Context, *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return &pb.ServerReadyResponse{Ready: true}, nil
}

func (s *tlsModels) ModelReady(context.Context, *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	return &pb.ModelReadyResponse{Ready: true}, nil
}

func (s *tlsModels) ModelInfer(ctx context.Context, req *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	select {
	case s.ids <- tlsconfig.GRPCIdentity(ctx):
	default:
	}
	f32 := func(x float32) []byte { return binary.LittleEndian.AppendUint32(nil, math.Float32bits(x)) }
	return &pb.ModelInferResponse{
		ModelName: req.GetModelName(), ModelVersion: "1", Id: req.GetId(),
		Outputs: []*pb.ModelInferResponse_InferOutputTensor{
			{Name: "eta_prediction", Datatype: "FP32", Shape: []int64{1, 1}},
			{Name: "confidence_score", Datatype: "FP32", Shape: []int64{1, 1}},
		},
		RawOutputContents: [][]byte{f32(42), f32(0.9)},
	}, nil
}

// serverTLS is a listener TLS configuration with f's server certificate
// that requires client certificates from f's CA.
func serverTLS(t *testing.T, f *tlsrun.Files) *tls.Config {
	t.Helper()
	s, err := tlsconfig.NewServer("test", tlsconfig.ServerOptions{CertFile: f.ServerCert, KeyFile: f.ServerKey, ClientCAFile: f.CAFile}, nil, nil)
	require.NoError(t, err)
	return s.Config()
}

// startTLSModels serves tlsModels over mTLS on 127.0.0.1.
func startTLSModels(t *testing.T, f *tlsrun.Files) (string, *tlsModels) {
	t.Helper()
	m := &tlsModels{ids: make(chan string, 256)}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(serverTLS(t, f))))
	pb.RegisterGRPCInferenceServiceServer(srv, m)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Stop()
		require.NoError(t, <-done)
	})
	return ln.Addr().String(), m
}

// withKServe wires real KServe clients into the gateway: a plaintext one
// and one per backend with a tls block.
func withKServe(t *testing.T) func(*gateway.Options) {
	t.Helper()
	return func(o *gateway.Options) {
		plain := kserve.New(kserve.Options{}, nil)
		t.Cleanup(func() { _ = plain.Close() })
		o.Remote = plain
		o.RemoteTLS = func(cfg *tls.Config) gateway.RemoteClient { return kserve.New(kserve.Options{TLS: cfg}, nil) }
	}
}

// tlsBlock is a backend's tls block in flow style.
func tlsBlock(caFile string, f *tlsrun.Files, clientCert bool) string {
	s := fmt.Sprintf("{ca_file: %q", caFile)
	if clientCert {
		s += fmt.Sprintf(", cert_file: %q, key_file: %q", f.ClientCert, f.ClientKey)
	}
	return s + "}"
}

func remoteTLSConfig(t *testing.T, addr, tls string) string {
	t.Helper()
	return gatewayYAML(yamlOpts{
		plain: true, gateway: []string{anonAllowed},
		routes:   "[{name: default, timeout: 5s, route: {weighted: [{backend: remote, weight: 100}]}}]",
		backends: fmt.Sprintf(`[{name: remote, kind: kserve_grpc, endpoints: [%q], health_check: {interval: 200ms, timeout: 200ms}, tls: %s}]`, addr, tls),
	})
}

func TestBackendTLSGRPC(t *testing.T) {
	f := tlsrun.NewFiles(t)
	addr, models := startTLSModels(t, f)

	t.Run("mtls", func(t *testing.T) {
		e := newEnv(t, parseConfig(t, remoteTLSConfig(t, addr, tlsBlock(f.CAFile, f, true))), withKServe(t))
		res := e.post(t, plainBody)
		requireOK(t, res)
		require.InDelta(t, 42, res.Outputs["eta_minutes"], 0)
		require.Equal(t, tlsrun.ClientIdentity, <-models.ids, "the model server saw the backend's client certificate")
	})

	t.Run("unknown CA", func(t *testing.T) {
		e := newEnv(t, parseConfig(t, remoteTLSConfig(t, addr, tlsBlock(f.OtherCAFile, f, true))), withKServe(t))
		res := e.post(t, plainBody)
		requireError(t, res, http.StatusServiceUnavailable, "upstream_unavailable")
		require.Contains(t, res.Error, "certificate signed by unknown authority")

		// A reload that fixes the CA gives the backend a new client.
		require.NoError(t, e.g.Reload(parseConfig(t, remoteTLSConfig(t, addr, tlsBlock(f.CAFile, f, true)))))
		requireOK(t, e.post(t, plainBody))
	})

	t.Run("health checks use the backend's TLS", func(t *testing.T) {
		for _, tc := range []struct {
			caFile, result string
		}{{f.CAFile, "healthy"}, {f.OtherCAFile, "unhealthy"}} {
			e := newEnv(t, parseConfig(t, remoteTLSConfig(t, addr, tlsBlock(tc.caFile, f, true))), withKServe(t))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- e.g.RunBackground(ctx) }()
			harness.WaitFor(t, 10*time.Second, 20*time.Millisecond, "a "+tc.result+" health check", func() (bool, string) {
				n := metricValue(t, e.reg, "sluice_gateway_health_checks_total", map[string]string{"backend": "remote", "result": tc.result})
				return n > 0, fmt.Sprintf("%v checks", n)
			})
			cancel()
			require.NoError(t, <-done)
		}
	})

	t.Run("missing CA file", func(t *testing.T) {
		cfg := parseConfig(t, remoteTLSConfig(t, addr, tlsBlock(f.Dir+"/nope.crt", f, false)))
		_, err := gateway.New(cfg, gateway.Options{Remote: newFakeRemote(), RemoteTLS: func(*tls.Config) gateway.RemoteClient { panic("unreachable") }}, nil, nil)
		require.ErrorContains(t, err, `backend "remote": tls: read ca_file`)
	})

	t.Run("no TLS client factory", func(t *testing.T) {
		cfg := parseConfig(t, remoteTLSConfig(t, addr, tlsBlock(f.CAFile, f, false)))
		_, err := gateway.New(cfg, gateway.Options{Remote: newFakeRemote()}, nil, nil)
		require.ErrorContains(t, err, "RemoteTLS")
	})
}

func TestBackendTLSHTTP(t *testing.T) {
	f := tlsrun.NewFiles(t)
	seen := make(chan string, 64)
	ms := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case seen <- tlsconfig.HTTPIdentity(r):
		default:
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"model_name":"simple"}`)
	}))
	ms.TLS = serverTLS(t, f)
	ms.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	ms.StartTLS()
	t.Cleanup(ms.Close)
	good := strings.TrimPrefix(ms.URL, "https://")
	plain := newModelServer(t) // speaks HTTP, not TLS

	env := func(t *testing.T, tls string, endpoints ...string) *testEnv {
		t.Helper()
		eps := make([]string, len(endpoints))
		for i, ep := range endpoints {
			eps[i] = fmt.Sprintf("%q", ep)
		}
		return newEnv(t, parseConfig(t, gatewayYAML(yamlOpts{
			plain: true, gateway: []string{
				clientsYAML("{}"),
				"proxy: {backend: models-http, timeout: 5s, retries: {retry_on: [connect-failure], num_retries: 1}}",
			},
			backends: `[{name: local, kind: in_process}, {name: models-http, kind: kserve_http, endpoints: [` +
				strings.Join(eps, ", ") + `], tls: ` + tls + `}]`,
		})))
	}
	body := `{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"INT32","data":[1]}]}`

	t.Run("mtls", func(t *testing.T) {
		e := env(t, tlsBlock(f.CAFile, f, true), good)
		w := proxyCall(t, e.g, http.MethodPost, "/v2/models/simple/infer", body)
		require.Equal(t, http.StatusOK, w.Code, "body: %s", w.Body)
		require.JSONEq(t, `{"model_name":"simple"}`, w.Body.String())
		require.Equal(t, tlsrun.ClientIdentity, <-seen)
	})
	t.Run("unknown CA", func(t *testing.T) {
		e := env(t, tlsBlock(f.OtherCAFile, f, true), good)
		w := proxyCall(t, e.g, http.MethodPost, "/v2/models/simple/infer", body)
		require.Equal(t, http.StatusBadGateway, w.Code, "body: %s", w.Body)
		require.Contains(t, w.Body.String(), "certificate signed by unknown authority")
	})
	t.Run("an endpoint without TLS is a connect failure", func(t *testing.T) {
		e := env(t, tlsBlock(f.CAFile, f, true), plain.addr, good)
		for range 10 {
			w := proxyCall(t, e.g, http.MethodPost, "/v2/models/simple/infer", body)
			require.Equal(t, http.StatusOK, w.Code, "body: %s", w.Body)
		}
		got, _ := plain.requests()
		require.Empty(t, got, "no request reached the plaintext server")
	})
}

func TestRateLimitRedisTLS(t *testing.T) {
	f := tlsrun.NewFiles(t)
	srv := tlsrun.StartRedis(t, f, tlsrun.RedisOptions{RequireClientCert: true})
	var id [6]byte
	_, _ = rand.Read(id[:])
	prefix := "sluice:test:rltls:" + hex.EncodeToString(id[:]) + ":"

	cfg := func(tls string) string {
		return gatewayYAML(yamlOpts{plain: true, gateway: []string{
			fmt.Sprintf(`clients: [{id: alice, api_key_sha256: %s, rate_limit: {requests_per_second: 0.01, burst: 2}}, {id: warm, api_key_sha256: %s, rate_limit: {requests_per_second: 1000, burst: 1000}}]`,
				auth.HashKey("alice-key"), auth.HashKey("warm-key")),
			fmt.Sprintf(`rate_limit_backend: {type: redis, redis: {addrs: [%q], key_prefix: %q, dial_timeout: 2s, tls: %s}}`, srv.Addr, prefix, tls),
		}})
	}
	decisions := func(e *testEnv, backend string) float64 {
		return metricValue(t, e.reg, "sluice_gateway_ratelimit_decisions_total", map[string]string{"backend": backend})
	}

	t.Run("mtls", func(t *testing.T) {
		e := newEnv(t, parseConfig(t, cfg(tlsBlock(f.CAFile, f, true))))
		// A decision has 50ms for its Redis round trip, and the first one
		// also dials and shakes hands (slow under the race detector): until
		// Redis answers in time, the local buckets decide (fail open).
		harness.WaitFor(t, 15*time.Second, 50*time.Millisecond, "Redis deciding over TLS", func() (bool, string) {
			if n := decisions(e, "redis"); n > 0 {
				return true, ""
			}
			requireOK(t, e.post(t, plainBody, "Authorization", "Bearer warm-key"))
			return false, "only local decisions"
		})
		before := decisions(e, "redis")
		for _, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
			res := e.post(t, plainBody, "Authorization", "Bearer alice-key")
			require.Equal(t, want, res.Code, "body: %s", res.Body)
		}
		require.InDelta(t, 3, decisions(e, "redis")-before, 0, "Redis decided alice's requests over TLS")

		c := redis.NewClient(&redis.Options{Addr: srv.Addr, TLSConfig: f.ClientConfig(t, true)})
		defer c.Close()
		keys, err := c.Keys(t.Context(), prefix+"*").Result()
		require.NoError(t, err)
		require.Contains(t, keys, prefix+"rl:client:alice", "alice's bucket is in Redis")
		require.NoError(t, c.Del(t.Context(), keys...).Err())
	})
	t.Run("unknown CA fails open to the local buckets", func(t *testing.T) {
		e := newEnv(t, parseConfig(t, cfg(tlsBlock(f.OtherCAFile, f, true))))
		for range 3 {
			requireOK(t, e.post(t, plainBody, "Authorization", "Bearer warm-key"))
		}
		require.Zero(t, decisions(e, "redis"))
		require.InDelta(t, 3, decisions(e, "local"), 0)
	})
	t.Run("unreadable client certificate refuses the configuration", func(t *testing.T) {
		bad := fmt.Sprintf("{ca_file: %q, cert_file: %q, key_file: %q}", f.CAFile, f.CAFile, f.ClientKey)
		_, err := gateway.New(parseConfig(t, cfg(bad)), gateway.Options{}, nil, nil)
		require.ErrorContains(t, err, "rate_limit_backend.redis.tls")
	})
}
