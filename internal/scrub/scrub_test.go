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
