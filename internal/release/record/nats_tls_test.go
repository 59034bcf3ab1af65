package record

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/testutil/tlsrun"
	"github.com/sluice-ml/sluice/internal/tlsconfig"
)

func TestNATSSinkTLS(t *testing.T) {
	f := tlsrun.NewFiles(t)
	srv := tlsrun.StartNATS(t, f, tlsrun.NATSOptions{RequireClientCert: true})
	opts := func(t *testing.T, o tlsconfig.ClientOptions) NATSOptions {
		t.Helper()
		cfg, err := tlsconfig.ClientConfig(o)
		require.NoError(t, err)
		return NATSOptions{URL: "nats://" + srv.Addr, Stream: "SLUICE_TLS_TEST", SubjectPrefix: "tlstest", TLS: cfg, AckTimeout: 5 * time.Second}
	}

	t.Run("mtls", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		o := opts(t, tlsconfig.ClientOptions{CAFile: f.CAFile, CertFile: f.ClientCert, KeyFile: f.ClientKey})
		sink, err := NewNATSSink(ctx, o, nil, nil)
		require.NoError(t, err)
		n, err := sink.Write(ctx, records(0, 3))
		require.NoError(t, err)
		require.Equal(t, 3, n)
		require.Equal(t, NATSStats{Published: 3, Acked: 3}, sink.Stats())
		require.NoError(t, sink.Close(ctx))
		// The stream reader connects with the same TLS options.
		requireIDs(t, readStream(t, o, StreamOptions{}), 0, 3)
	})

	for _, tc := range []struct {
		name string
		opts tlsconfig.ClientOptions
		msg  string
	}{
		{"unknown CA", tlsconfig.ClientOptions{CAFile: f.OtherCAFile, CertFile: f.ClientCert, KeyFile: f.ClientKey}, "certificate signed by unknown authority"},
		{"wrong server name", tlsconfig.ClientOptions{CAFile: f.CAFile, CertFile: f.ClientCert, KeyFile: f.ClientKey, ServerName: "nats.example"}, "not nats.example"},
		{"no client certificate", tlsconfig.ClientOptions{CAFile: f.CAFile}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			_, err := NewNATSSink(ctx, opts(t, tc.opts), nil, nil)
			require.ErrorContains(t, err, "nats sink: connect nats://"+srv.Addr)
			require.ErrorContains(t, err, tc.msg)
		})
	}
	t.Run("plaintext client", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		_, err := NewNATSSink(ctx, NATSOptions{URL: "nats://" + srv.Addr, Stream: "SLUICE_TLS_TEST"}, nil, nil)
		require.Error(t, err)
	})
}
