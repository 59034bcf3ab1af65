package tlsconfig

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-ml/sluice/internal/tlsconfig/tlstest"
)

func TestGRPCIdentity(t *testing.T) {
	clients := tlstest.NewCA(t)
	p := newPKI(t, clients, "")
	s, _ := newServer(t, p)

	seen := make(chan string, 10)
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(s.Config())),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			seen <- GRPCIdentity(ctx)
			return h(ctx, req)
		}),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Stop()
		require.NoError(t, <-done)
	})

	call := func(t *testing.T, cert ...string) error {
		t.Helper()
		tlsCfg := trusting(p.serverCA)
		if len(cert) > 0 {
			tlsCfg = trusting(p.serverCA, issueClient(t, clients, cert[0], cert[1:]...))
		}
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
		require.NoError(t, err)
		defer conn.Close()
		_, err = healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
		return err
	}

	t.Run("client certificate", func(t *testing.T) {
		require.NoError(t, call(t, "alice", "spiffe://sluice/ns/ml/sa/alice"))
		require.Equal(t, "spiffe://sluice/ns/ml/sa/alice", <-seen)
	})
	t.Run("no client certificate", func(t *testing.T) {
		err := call(t)
		require.Equal(t, codes.Unavailable, status.Code(err), "got %v", err)
		require.Empty(t, seen)
	})
	t.Run("no peer", func(t *testing.T) {
		require.Empty(t, GRPCIdentity(t.Context()))
	})
}
