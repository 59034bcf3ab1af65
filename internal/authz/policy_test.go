package authz

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

const (
	opsSecret    = "ops-secret-0123456789"
	viewerSecret = "viewer-secret-abcdef"
	restrictKey  = "admin-key"
	restrictVal  = "s3cret=v:1"
)

func testTokens() []Token {
	return []Token{
		{ID: "ops", SHA256: HashToken(opsSecret), Role: "operate"},
		{ID: "viewer", SHA256: HashToken(viewerSecret), Role: "read"},
	}
}

func mustPolicy(t *testing.T, o PolicyOptions) *Policy {
	t.Helper()
	p, err := NewPolicy(o)
	require.NoError(t, err)
	return p
}

// testCert makes a self-signed certificate with the given identities.
func testCert(t *testing.T, cn string, dns []string, uri string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     dns,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if uri != "" {
		u, err := url.Parse(uri)
		require.NoError(t, err)
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return cert
}

func verified(c *x509.Certificate) *tls.ConnectionState {
	return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}, VerifiedChains: [][]*x509.Certificate{{c}}}
}

func TestAuthorize(t *testing.T) {
	restriction := Restriction{Groups: []string{GroupModelRepository, GroupTrace}, Key: restrictKey, Value: restrictVal}
	robot := testCert(t, "robot", nil, "spiffe://sluice/robot")
	reader := testCert(t, "reader.example", []string{"reader.example"}, "")
	stranger := testCert(t, "stranger", nil, "")
	policies := map[string]PolicyOptions{
		"closed":     {Tokens: testTokens(), Restrictions: []Restriction{restriction}},
		"openReads":  {Tokens: testTokens(), OpenReads: true},
		"openWrites": {OpenWrites: true},
		"certs": {Tokens: testTokens(), CertRoles: map[string]string{
			"spiffe://sluice/robot": "operate", "reader.example": "read",
		}},
	}
	bearer := func(s string) map[string]string { return map[string]string{"Authorization": "Bearer " + s} }
	for _, tc := range []struct {
		name    string
		policy  string
		need    Role
		group   string
		headers map[string]string
		tls     *tls.ConnectionState
		status  int    // 0: allowed
		reason  string // with status
		id, via string // when allowed, or the caller known despite a refusal
	}{
		{name: "no credential", policy: "closed", need: RoleOperate, status: 401, reason: ReasonMissingCredential},
		{name: "no credential for a read", policy: "closed", need: RoleRead, status: 401, reason: ReasonMissingCredential},
		{name: "health needs nothing", policy: "closed", need: RoleNone, id: AnonymousID, via: ViaOpen},
		{name: "wrong token", policy: "closed", need: RoleOperate, headers: bearer("nope"), status: 401, reason: ReasonInvalidCredential},
		{name: "hash instead of secret", policy: "closed", need: RoleRead, headers: bearer(HashToken(opsSecret)), status: 401, reason: ReasonInvalidCredential},
		{name: "wrong token on health", policy: "closed", need: RoleNone, headers: bearer("nope"), status: 401, reason: ReasonInvalidCredential},
		{name: "read token on operate", policy: "closed", need: RoleOperate, headers: bearer(viewerSecret), status: 403, reason: ReasonInsufficientRole, id: "viewer", via: ViaToken},
		{name: "read token on read", policy: "closed", need: RoleRead, headers: bearer(viewerSecret), id: "viewer", via: ViaToken},
		{name: "operate token", policy: "closed", need: RoleOperate, headers: bearer(opsSecret), id: "ops", via: ViaToken},
		{name: "operate implies read", policy: "closed", need: RoleRead, headers: bearer(opsSecret), id: "ops", via: ViaToken},
		{name: "lower-case scheme, extra blanks", policy: "closed", need: RoleOperate, headers: map[string]string{"Authorization": "  bearer \t " + opsSecret + " "}, id: "ops", via: ViaToken},
		{name: "x-sluice-token", policy: "closed", need: RoleOperate, headers: map[string]string{"X-Sluice-Token": opsSecret}, id: "ops", via: ViaToken},
		{name: "authorization wins", policy: "closed", need: RoleOperate, headers: map[string]string{"Authorization": "Bearer " + viewerSecret, "X-Sluice-Token": opsSecret}, status: 403, reason: ReasonInsufficientRole, id: "viewer", via: ViaToken},
		{name: "other scheme is ignored", policy: "closed", need: RoleOperate, headers: map[string]string{"Authorization": "Basic Zm9vOmJhcg==", "X-Sluice-Token": opsSecret}, id: "ops", via: ViaToken},
		{name: "other scheme alone is no credential", policy: "closed", need: RoleOperate, headers: map[string]string{"Authorization": "Basic Zm9vOmJhcg=="}, status: 401, reason: ReasonMissingCredential},
		{name: "empty bearer is no credential", policy: "closed", need: RoleOperate, headers: map[string]string{"Authorization": "Bearer "}, status: 401, reason: ReasonMissingCredential},
		{name: "over-long bearer", policy: "closed", need: RoleOperate, headers: bearer(strings.Repeat("a", MaxCredentialBytes)), status: 401, reason: ReasonInvalidCredential},
		{name: "over-long x-sluice-token", policy: "closed", need: RoleOperate, headers: map[string]string{"X-Sluice-Token": strings.Repeat("a", MaxCredentialBytes+1)}, status: 401, reason: ReasonInvalidCredential},

		{name: "open reads: anonymous read", policy: "openReads", need: RoleRead, id: AnonymousID, via: ViaOpen},
		{name: "open reads: anonymous write", policy: "openReads", need: RoleOperate, status: 401, reason: ReasonMissingCredential},
		{name: "open reads: wrong token still refused", policy: "openReads", need: RoleRead, headers: bearer("nope"), status: 401, reason: ReasonInvalidCredential},
		{name: "open reads: read token on read", policy: "openReads", need: RoleRead, headers: bearer(viewerSecret), id: "viewer", via: ViaToken},
		{name: "open writes: anonymous write", policy: "openWrites", need: RoleOperate, id: AnonymousID, via: ViaOpen},
		{name: "open writes: anonymous read", policy: "openWrites", need: RoleRead, id: AnonymousID, via: ViaOpen},
		// No tokens configured: a bearer credential is meant for someone else
		// (a proxy, a client's default headers) and changes nothing.
		{name: "open writes: a bearer credential is not ours and is ignored", policy: "openWrites", need: RoleOperate, headers: bearer("nope"), id: AnonymousID, via: ViaOpen},

		{name: "restricted: header missing", policy: "closed", need: RoleOperate, group: GroupModelRepository, headers: bearer(opsSecret), status: 403, reason: ReasonRestrictedAPI},
		{name: "restricted: header wrong", policy: "closed", need: RoleOperate, group: GroupModelRepository, headers: map[string]string{"Authorization": "Bearer " + opsSecret, restrictKey: "s3cret"}, status: 403, reason: ReasonRestrictedAPI},
		{name: "restricted: header case-insensitive name, exact value", policy: "closed", need: RoleOperate, group: GroupModelRepository, headers: map[string]string{"Authorization": "Bearer " + opsSecret, "ADMIN-KEY": restrictVal}, id: "ops", via: ViaToken},
		{name: "restricted: right header still needs the role", policy: "closed", need: RoleOperate, group: GroupTrace, headers: map[string]string{restrictKey: restrictVal}, status: 401, reason: ReasonMissingCredential},
		{name: "restricted: checked before the credential", policy: "closed", need: RoleOperate, group: GroupTrace, status: 403, reason: ReasonRestrictedAPI},
		{name: "unrestricted group", policy: "closed", need: RoleNone, group: GroupHealth, id: AnonymousID, via: ViaOpen},

		{name: "mtls operate", policy: "certs", need: RoleOperate, tls: verified(robot), id: "spiffe://sluice/robot", via: ViaMTLS},
		{name: "mtls dns identity, read", policy: "certs", need: RoleRead, tls: verified(reader), id: "reader.example", via: ViaMTLS},
		{name: "mtls read on operate", policy: "certs", need: RoleOperate, tls: verified(reader), status: 403, reason: ReasonInsufficientRole, id: "reader.example", via: ViaMTLS},
		{name: "mtls unmapped identity", policy: "certs", need: RoleRead, tls: verified(stranger), status: 403, reason: ReasonInsufficientRole, id: "stranger", via: ViaMTLS},
		{name: "mtls unverified chain", policy: "certs", need: RoleRead, tls: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{robot}}, status: 401, reason: ReasonMissingCredential},
		{name: "mtls ignored without cert roles", policy: "closed", need: RoleRead, tls: verified(robot), status: 401, reason: ReasonMissingCredential},
		{name: "token wins over certificate", policy: "certs", need: RoleOperate, tls: verified(robot), headers: bearer(viewerSecret), status: 403, reason: ReasonInsufficientRole, id: "viewer", via: ViaToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPolicy(t, policies[tc.policy])
			r := httptest.NewRequest(http.MethodPost, "/x", nil)
			for k, v := range tc.headers {
				r.Header.Set(k, v)
			}
			r.TLS = tc.tls
			pr, err := p.Authorize(r, tc.need, tc.group)
			require.Equal(t, r.RemoteAddr, pr.Addr)
			require.Equal(t, tc.id, pr.ID)
			require.Equal(t, tc.via, pr.Via)
			if tc.status == 0 {
				require.NoError(t, err)
				return
			}
			d, ok := errors.AsType[*DeniedError](err)
			require.True(t, ok, "error %v is not a *DeniedError", err)
			require.Equal(t, tc.status, d.Status)
			require.Equal(t, tc.reason, d.Reason)
			for _, v := range tc.headers {
				if len(v) > 8 && !strings.HasPrefix(v, "Basic") {
					require.NotContains(t, d.Message, strings.TrimSpace(strings.TrimPrefix(v, "Bearer ")), "must not echo a secret")
				}
			}
			if tc.reason == ReasonRestrictedAPI {
				require.Equal(t, "This API is restricted, expecting header '"+restrictKey+"'", d.Message)
			}
		})
	}
}

func TestAuthorizeGRPC(t *testing.T) {
	robot := testCert(t, "robot", nil, "spiffe://sluice/robot")
	p := mustPolicy(t, PolicyOptions{
		Tokens:       testTokens(),
		Restrictions: []Restriction{{Groups: []string{GroupModelRepository}, Key: "Admin-Key", Value: "v"}},
		CertRoles:    map[string]string{"spiffe://sluice/robot": "operate"},
	})
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4242}
	ctxWith := func(tlsState *tls.ConnectionState, kv ...string) context.Context {
		ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs(kv...))
		pe := &peer.Peer{Addr: addr}
		if tlsState != nil {
			pe.AuthInfo = credentials.TLSInfo{State: *tlsState}
		}
		return peer.NewContext(ctx, pe)
	}
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		need   Role
		group  string
		reason string
		id     string
	}{
		{name: "no credential", ctx: ctxWith(nil), need: RoleRead, reason: ReasonMissingCredential},
		{name: "authorization metadata", ctx: ctxWith(nil, "authorization", "Bearer "+opsSecret), need: RoleOperate, id: "ops"},
		{name: "x-sluice-token metadata", ctx: ctxWith(nil, "x-sluice-token", viewerSecret), need: RoleRead, id: "viewer"},
		{name: "read token on operate", ctx: ctxWith(nil, "x-sluice-token", viewerSecret), need: RoleOperate, reason: ReasonInsufficientRole, id: "viewer"},
		{name: "wrong token", ctx: ctxWith(nil, "authorization", "Bearer x"), need: RoleRead, reason: ReasonInvalidCredential},
		{name: "mtls peer", ctx: ctxWith(verified(robot)), need: RoleOperate, id: "spiffe://sluice/robot"},
		{name: "restricted without metadata", ctx: ctxWith(nil, "authorization", "Bearer "+opsSecret), need: RoleOperate, group: GroupModelRepository, reason: ReasonRestrictedAPI},
		{name: "restricted with the bare key", ctx: ctxWith(nil, "authorization", "Bearer "+opsSecret, "admin-key", "v"), need: RoleOperate, group: GroupModelRepository, reason: ReasonRestrictedAPI},
		{name: "restricted with triton's prefix", ctx: ctxWith(nil, "authorization", "Bearer "+opsSecret, "triton-grpc-protocol-admin-key", "v"), need: RoleOperate, group: GroupModelRepository, id: "ops"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, err := p.AuthorizeGRPC(tc.ctx, tc.need, tc.group)
			require.Equal(t, addr.String(), pr.Addr)
			require.Equal(t, tc.id, pr.ID)
			if tc.reason == "" {
				require.NoError(t, err)
				return
			}
			d, ok := errors.AsType[*DeniedError](err)
			require.True(t, ok, "error %v is not a *DeniedError", err)
			require.Equal(t, tc.reason, d.Reason)
			if tc.reason == ReasonRestrictedAPI {
				require.Equal(t, "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'", d.Message)
			}
		})
	}
}

func TestNewPolicyErrors(t *testing.T) {
	good := HashToken("x")
	for _, tc := range []struct {
		name string
		opts PolicyOptions
		want []string
	}{
		{"empty id", PolicyOptions{Tokens: []Token{{SHA256: good, Role: "read"}}}, []string{"tokens[0]: empty id"}},
		{"duplicate id", PolicyOptions{Tokens: []Token{{ID: "a", SHA256: good, Role: "read"}, {ID: "a", SHA256: HashToken("y"), Role: "read"}}}, []string{`token "a": duplicate id`}},
		{"duplicate hash", PolicyOptions{Tokens: []Token{{ID: "a", SHA256: good, Role: "read"}, {ID: "b", SHA256: strings.ToUpper(good), Role: "operate"}}}, []string{`tokens "a" and "b": same secret`}},
		{"bad hex", PolicyOptions{Tokens: []Token{{ID: "a", SHA256: "zz" + good[2:], Role: "read"}}}, []string{`token "a": token_sha256 must be 64 hex digits`}},
		{"short hash", PolicyOptions{Tokens: []Token{{ID: "a", SHA256: good[:62], Role: "read"}}}, []string{`token "a": token_sha256 must be 64 hex digits`}},
		{"bad role", PolicyOptions{Tokens: []Token{{ID: "a", SHA256: good, Role: "admin"}}}, []string{`token "a": role "admin": want read or operate`}},
		{"plain token left", PolicyOptions{Tokens: []Token{{ID: "a", SHA256: good, Token: "x", Role: "read"}}}, []string{`token "a": a plain token must not reach the policy`}},
		{"bad cert role", PolicyOptions{CertRoles: map[string]string{"spiffe://x": "none"}}, []string{`cert_roles["spiffe://x"]: role "none"`}},
		{"bad restriction", PolicyOptions{Restrictions: []Restriction{{Groups: []string{"repo"}, Key: "k", Value: "v"}}}, []string{`unknown API group "repo"`}},
		{"group in two restrictions", PolicyOptions{Restrictions: []Restriction{
			{Groups: []string{GroupTrace}, Key: "k", Value: "v"}, {Groups: []string{GroupLogging, GroupTrace}, Key: "k2", Value: "v"},
		}}, []string{`restricted API group "trace" can not be in more than one restriction`}},
		{"open writes with tokens", PolicyOptions{OpenWrites: true, Tokens: []Token{{ID: "a", SHA256: good, Role: "operate"}}}, []string{"open writes with tokens configured"}},
		{"every problem at once", PolicyOptions{Tokens: []Token{{ID: "a", SHA256: "x", Role: "x"}, {SHA256: good, Role: "read"}}}, []string{
			`token "a": role "x"`, `token "a": token_sha256`, "tokens[1]: empty id",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewPolicy(tc.opts)
			require.Error(t, err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
			require.NotContains(t, err.Error(), good, "errors must not repeat the hash")
		})
	}
}

func TestPolicyEmpty(t *testing.T) {
	require.True(t, mustPolicy(t, PolicyOptions{OpenReads: true}).Empty())
	require.False(t, mustPolicy(t, PolicyOptions{Tokens: testTokens()}).Empty())
	require.False(t, mustPolicy(t, PolicyOptions{CertRoles: map[string]string{"a": "read"}}).Empty())
}

func TestRole(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Role
		err  bool
	}{
		{in: "read", want: RoleRead},
		{in: "operate", want: RoleOperate},
		{in: "none", err: true},
		{in: "", err: true},
		{in: "Operate", err: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseRole(tc.in)
			if tc.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.in, got.String())
		})
	}
	require.Equal(t, "none", RoleNone.String())
	require.Less(t, RoleNone, RoleRead)
	require.Less(t, RoleRead, RoleOperate)
}

func TestHashToken(t *testing.T) {
	// echo -n abc | sha256sum
	require.Equal(t, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", HashToken("abc"))
}

func TestParseBearer(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"BEARER\tabc", "abc", true},
		{"  Bearer   abc  ", "abc", true},
		{"Bearer a b", "a b", true},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Basic abc", "", false},
		{"Bearerabc", "", false},
		{"abc", "", false},
		{"", "", false},
		{"Bearer ab\x00c", "", false},
		{"Bearer ab\nc", "", false},
		{"Bearer ab\x7fc", "", false},
		{"Bearer " + strings.Repeat("x", MaxCredentialBytes), "", false},
		{"Bearer " + strings.Repeat("x", MaxCredentialBytes-7), strings.Repeat("x", MaxCredentialBytes-7), true},
	} {
		t.Run(tc.in[:min(len(tc.in), 20)], func(t *testing.T) {
			got, ok := ParseBearer(tc.in)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
		})
	}
}
