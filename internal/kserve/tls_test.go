package kserve

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/grpcapi"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/testutil/tlsrun"
	"github.com/sluice-ml/sluice/internal/tlsconfig"
)

// startSluiceTLS serves a grpcapi.Service over TLS with f's server
// certificate; clientCA makes it require client certificates issued by
// f's CA (mTLS). Each call's client identity goes to the returned channel.
func startSluiceTLS(t *testing.T, f *tlsrun.Files, clientCA bool) (string, <-chan string) {
	t.Helper()
	so := tlsconfig.ServerOptions{CertFile: f.ServerCert, KeyFile: f.ServerKey}
	if clientCA {
		so.ClientCAFile = f.CAFile
	}
	ts, err := tlsconfig.NewServer("models_grpc", so, nil, nil)
	require.NoError(t, err)
	ids := make(chan string, 64)
	svc := grpcapi.New(newFakeModels(), grpcapi.Options{}, nil, nil)
	srv := grpcapi.NewServer(svc, grpcapi.ServerOptions{Extra: []grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(ts.Config())),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			select {
			case ids <- tlsconfig.GRPCIdentity(ctx):
			default:
			}
			return h(ctx, req)
		}),
	}})
	return serve(t, srv, svc.Shutdown), ids
}

// clientTLS builds the client configuration the gateway builds from a
// backend's tls block.
func clientTLS(t *testing.T, o tlsconfig.ClientOptions) Options {
	t.Helper()
	cfg, err := tlsconfig.ClientConfig(o)
	require.NoError(t, err)
	return Options{TLS: cfg, DialTimeout: 2 * time.Second}
}

func TestTLS(t *testing.T) {
	f := tlsrun.NewFiles(t)
	addr, ids := startSluiceTLS(t, f, false)
	echo := &infer.Request{Model: "echo", Inputs: []infer.Tensor{
		{Name: "INPUT0", DataType: infer.FP32, Shape: infer.Shape{2}, Data: fp32Bytes(1, 2)},
	}}

	t.Run("trusted CA", func(t *testing.T) {
		c := newClient(t, clientTLS(t, tlsconfig.ClientOptions{CAFile: f.CAFile}))
		ctx := ctxTimeout(t, 10*time.Second)
		resp, err := c.Infer(ctx, addr, echo)
		require.NoError(t, err)
		require.Equal(t, echo.Inputs[0].Data, resp.Outputs[0].Data)
		require.Empty(t, <-ids, "no client certificate, no identity")
		ready, err := c.ServerReady(ctx, addr)
		require.NoError(t, err)
		require.True(t, ready)
		md, err := c.ModelMetadata(ctx, addr, "echo", "")
		require.NoError(t, err)
		require.Equal(t, "echo", md.Name)
	})
	t.Run("server name given", func(t *testing.T) {
		c := newClient(t, clientTLS(t, tlsconfig.ClientOptions{CAFile: f.CAFile, ServerName: "localhost"}))
		_, err := c.Infer(ctxTimeout(t, 10*time.Second), addr, echo)
		require.NoError(t, err)
	})

	// A server certificate that does not verify is a connect failure whose
	// message says why.
	failures := []struct {
		name string
		opts tlsconfig.ClientOptions
		msg  string
	}{
		{"unknown CA", tlsconfig.ClientOptions{CAFile: f.OtherCAFile}, "certificate signed by unknown authority"},
		{"wrong server name", tlsconfig.ClientOptions{CAFile: f.CAFile, ServerName: "models.example"}, "not models.example"},
	}
	for _, tc := range failures {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, clientTLS(t, tc.opts))
			_, err := c.Infer(ctxTimeout(t, 10*time.Second), addr, echo)
			requireRPCError(t, err, codes.Unavailable, apierr.KindUnavailable, ReasonUnavailable, true)
			require.ErrorContains(t, err, tc.msg)
			_, err = c.ServerReady(ctxTimeout(t, 10*time.Second), addr)
			require.ErrorContains(t, err, tc.msg, "health checks fail the same way")
		})
	}

	t.Run("plaintext client", func(t *testing.T) {
		c := newClient(t, Options{DialTimeout: 2 * time.Second})
		_, err := c.Infer(ctxTimeout(t, 10*time.Second), addr, echo)
		require.Equal(t, codes.Unavailable, status.Code(err), "error: %v", err)
		require.True(t, IsConnectFailure(err), "error: %v", err)
	})
	t.Run("plaintext server", func(t *testing.T) {
		plain := startSluice(t)
		c := newClient(t, clientTLS(t, tlsconfig.ClientOptions{CAFile: f.CAFile}))
		_, err := c.Infer(ctxTimeout(t, 10*time.Second), plain.addr, echo)
		requireRPCError(t, err, codes.Unavailable, apierr.KindUnavailable, ReasonUnavailable, true)
		require.ErrorContains(t, err, "handshake")
	})
}

func TestMTLS(t *testing.T) {
	f := tlsrun.NewFiles(t)
	addr, ids := startSluiceTLS(t, f, true)
	echo := &infer.Request{Model: "echo"}

	t.Run("client certificate", func(t *testing.T) {
		c := newClient(t, clientTLS(t, tlsconfig.ClientOptions{CAFile: f.CAFile, CertFile: f.ClientCert, KeyFile: f.ClientKey}))
		_, err := c.Infer(ctxTimeout(t, 10*time.Second), addr, echo)
		require.NoError(t, err)
		require.Equal(t, tlsrun.ClientIdentity, <-ids, "the server saw the client certificate")
	})
	t.Run("no client certificate", func(t *testing.T) {
		c := newClient(t, clientTLS(t, tlsconfig.ClientOptions{CAFile: f.CAFile}))
		_, err := c.Infer(ctxTimeout(t, 10*time.Second), addr, echo)
		// The server refuses the handshake after the client has finished
		// its side (TLS 1.3): the client sees the alert ("certificate
		// required") or a broken pipe, whichever comes first.
		require.Equal(t, codes.Unavailable, status.Code(err), "error: %v", err)
		require.Empty(t, ids, "no call reached the service")
	})
}
