package scrub

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMessage(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"read tcp 127.0.0.1:41294->127.0.0.1:28079: i/o timeout", "[socket]: i/o timeout"},
		{"dial tcp [::1]:6379: connect: connection refused", "[socket]: connect: connection refused"},
		{"endpoint 10.0.0.7:8001 unavailable", "endpoint [address] unavailable"},
		{"upstream 10.1.2.3 failed", "upstream [address] failed"},
		{"lookup redis.internal:6379 failed", "lookup [address] failed"},
		{"open /var/lib/sluice/online.db: permission denied", "open [path]: permission denied"},
		{`model "parcel_eta" version 2 is not ready`, `model "parcel_eta" version 2 is not ready`},
		{"service \"parcel-eta\": online store unavailable", "service \"parcel-eta\": online store unavailable"},
		{"tensor 'x': expected shape [1,3], got [1,4]", "tensor 'x': expected shape [1,3], got [1,4]"},
		{"ratio 1.5 over 0.25", "ratio 1.5 over 0.25"},
	} {
		require.Equal(t, tt.want, Message(tt.in), tt.in)
	}
}

func FuzzMessage(f *testing.F) {
	f.Add("read tcp 127.0.0.1:41294->127.0.0.1:28079: i/o timeout")
	f.Add("open /etc/sluice/x.pem: no such file")
	f.Add("[fe80::1%eth0]:80")
	f.Fuzz(func(t *testing.T, s string) {
		out := Message(s)
		if len(out) > 2*len(s)+64 {
			t.Fatalf("grew from %d to %d bytes", len(s), len(out))
		}
		// Scrubbing is idempotent.
		require.Equal(t, out, Message(out))
	})
}

// TestMessageHostNames: host names and ports leave no trace (issue 22
// item 6), whatever wording carries them.
func TestMessageHostNames(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{
			`model server localhost:24398: Get "http://localhost:24398/v2/models/m/infer": dial tcp: connection refused`,
			`model server [address]: Get "[url]": dial tcp: connection refused`,
		},
		{"ModelInfer localhost:24397: Unavailable: connection error", "ModelInfer [address]: Unavailable: connection error"},
		{"ModelInfer models-0.models.svc.cluster.local:8001: Unavailable", "ModelInfer [address]: Unavailable"},
		{"lookup models-0.models on 10.96.0.10:53: no such host", "lookup [address] on [address]: no such host"},
		{"a localhost:1,b.internal:2 c", "a [address],[address] c"},
		{"grpc://feature-server:6566/x failed", "[url] failed"},
		{"at 12:30:45 the model failed", "at 12:30:45 the model failed"},
		{"Unavailable: retry later", "Unavailable: retry later"},
	} {
		require.Equal(t, tt.want, Message(tt.in), tt.in)
	}
}
