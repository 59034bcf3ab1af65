package authz

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var fwdKey = []byte("0123456789abcdef0123456789abcdef")

func TestForwardedRoundTrip(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	f := Forwarded{Client: "check;out=1", Addr: "10.0.0.7:51234"}
	v := SignForwarded(fwdKey, f, "req-1", now)
	got, err := VerifyForwarded(fwdKey, v, "req-1", now.Add(30*time.Second))
	require.NoError(t, err)
	require.Equal(t, f, got)
	for name, bad := range map[string]func() error{
		"other key": func() error {
			_, err := VerifyForwarded([]byte("another key of thirty-two bytes!"), v, "req-1", now)
			return err
		},
		"other request id": func() error { _, err := VerifyForwarded(fwdKey, v, "req-2", now); return err },
		"expired":          func() error { _, err := VerifyForwarded(fwdKey, v, "req-1", now.Add(3*time.Minute)); return err },
		"from the future":  func() error { _, err := VerifyForwarded(fwdKey, v, "req-1", now.Add(-3*time.Minute)); return err },
		"client changed": func() error {
			_, err := VerifyForwarded(fwdKey, strings.Replace(v, "check", "chuck", 1), "req-1", now)
			return err
		},
		"no key":    func() error { _, err := VerifyForwarded(nil, v, "req-1", now); return err },
		"malformed": func() error { _, err := VerifyForwarded(fwdKey, "v1;x", "req-1", now); return err },
	} {
		require.Error(t, bad(), name)
	}
}

// TestForwardedNeverOpensWrites: on a listener open to local writes (no
// tokens), a call the gateway vouched for is its client's: reads pass and
// name the client, writes need a credential; a header that does not
// verify is refused; without a key the header is ignored.
func TestForwardedNeverOpensWrites(t *testing.T) {
	p := mustPolicy(t, PolicyOptions{OpenReads: true, OpenWrites: true, ForwardedKey: fwdKey})
	req := func(hdr string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/v2/repository/models/m/load", nil)
		r.RemoteAddr = "127.0.0.1:40000"
		r.Header.Set("X-Request-Id", "req-9")
		if hdr != "" {
			r.Header.Set(HeaderForwardedClient, hdr)
		}
		return r
	}
	signed := SignForwarded(fwdKey, Forwarded{Client: "anonymous", Addr: "192.0.2.1:5555"}, "req-9", time.Now())

	pr, err := p.Authorize(req(""), RoleOperate, GroupModelRepository)
	require.NoError(t, err, "a local process keeps the demo's open writes")
	require.Equal(t, AnonymousID, pr.ID)

	pr, err = p.Authorize(req(signed), RoleRead, GroupInference)
	require.NoError(t, err)
	require.Equal(t, Principal{ID: "anonymous", Via: ViaGateway, Addr: "192.0.2.1:5555", Client: "anonymous", ProxyAddr: "127.0.0.1:40000"}, pr)

	pr, err = p.Authorize(req(signed), RoleOperate, GroupModelRepository)
	require.Error(t, err)
	require.Equal(t, ReasonMissingCredential, asDenied(err).Reason)
	require.Equal(t, "192.0.2.1:5555", pr.Addr, "the audit log gets the client's address")

	_, err = p.Authorize(req("v1;anonymous;x;1;00"), RoleRead, GroupInference)
	require.Equal(t, ReasonInvalidForwarded, asDenied(err).Reason)

	noKey := mustPolicy(t, PolicyOptions{OpenReads: true, OpenWrites: true})
	pr, err = noKey.Authorize(req("v1;anonymous;x;1;00"), RoleOperate, GroupModelRepository)
	require.NoError(t, err)
	require.False(t, pr.Proxied())
}

func FuzzVerifyForwarded(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	f.Add(SignForwarded(fwdKey, Forwarded{Client: "c", Addr: "10.0.0.1:1"}, "r", now), "r")
	f.Add("v1;%zz;;1800000000;00", "")
	f.Add(";;;;", "r")
	f.Fuzz(func(t *testing.T, value, reqID string) {
		got, err := VerifyForwarded(fwdKey, value, reqID, now)
		if err != nil {
			return
		}
		// Whatever verifies must be what the key signed.
		if SignForwarded(fwdKey, got, reqID, now) != value {
			if _, err2 := VerifyForwarded(fwdKey, SignForwarded(fwdKey, got, reqID, now), reqID, now); err2 != nil {
				t.Fatalf("%q verified as %+v, whose own signature does not", value, got)
			}
		}
	})
}
