package tlsconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// Identity returns the authenticated identity of the peer of a TLS
// connection: [CertIdentity] of the leaf of its first verified chain, or
// "" when the peer presented no certificate that was verified (plain TLS,
// client_auth "request" without a certificate, cs nil). Certificates that
// were presented but not verified never yield an identity.
func Identity(cs *tls.ConnectionState) string {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return ""
	}
	return CertIdentity(cs.VerifiedChains[0][0])
}

// CertIdentity returns the identity a certificate names: its first URI SAN
// (e.g. spiffe://cluster/ns/team/sa/app), else its first DNS SAN, else its
// first email SAN, else its subject common name. SANs come first because
// they are what X.509 profiles (RFC 6125, SPIFFE) define as the identity;
// the common name is kept as the last resort for older private CAs.
func CertIdentity(c *x509.Certificate) string {
	switch {
	case c == nil:
		return ""
	case len(c.URIs) > 0 && c.URIs[0] != nil:
		return c.URIs[0].String()
	case len(c.DNSNames) > 0:
		return c.DNSNames[0]
	case len(c.EmailAddresses) > 0:
		return c.EmailAddresses[0]
	default:
		return c.Subject.CommonName
	}
}

// HTTPIdentity returns the client identity of an HTTP request served over
// TLS ([Identity] of r.TLS), or "".
func HTTPIdentity(r *http.Request) string { return Identity(r.TLS) }

// GRPCIdentity returns the client identity of the gRPC call in ctx when the
// server runs with TLS transport credentials ([Identity] of the
// connection), or "".
func GRPCIdentity(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return ""
	}
	switch info := p.AuthInfo.(type) {
	case credentials.TLSInfo:
		return Identity(&info.State)
	case *credentials.TLSInfo:
		return Identity(&info.State)
	default:
		return ""
	}
}
