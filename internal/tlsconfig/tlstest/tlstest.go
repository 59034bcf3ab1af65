// Package tlstest makes throw-away certificate authorities and certificates
// for tests: ECDSA P-256 keys, PEM encoded, valid from an hour ago for a day.
// It is test support: nothing outside tests imports it.
//
// A typical mTLS test issues a server certificate and a client certificate
// from one CA and gives the CA to both sides:
//
//	ca := tlstest.NewCA(t)
//	certFile, keyFile := ca.WriteFiles(t, dir, "gateway") // valid for 127.0.0.1, ::1 and localhost
//	caFile := ca.WriteCAFile(t, dir, "ca")
//	client := ca.ClientConfig(t, "alice", "spiffe://sluice/alice")
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// CA is a self-signed certificate authority. Each CA has its own key and a
// distinct subject, so two CAs never trust each other's certificates.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

// NewCA makes a new certificate authority.
func NewCA(tb testing.TB) *CA {
	tb.Helper()
	key := newKey(tb)
	serial := newSerial(tb)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "sluice test CA " + serial.Text(16)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatalf("tlstest: create CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("tlstest: parse CA certificate: %v", err)
	}
	return &CA{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
	}
}

// CertPEM returns the CA certificate, PEM encoded: the content of a
// client_ca_file or ca_file.
func (ca *CA) CertPEM() []byte { return append([]byte(nil), ca.certPEM...) }

// Pool returns a pool holding only the CA certificate.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return pool
}

// Issue issues a certificate usable by a server and by a client (extended
// key usages serverAuth and clientAuth) with a fresh key and a random serial.
//
// Each SAN is read by its shape: "scheme://..." is a URI SAN, an IP address
// an IP SAN, "user@host" an email SAN, anything else a DNS SAN. When no DNS
// or URI SAN is given, commonName becomes the first DNS SAN, so that the
// certificate's client identity (tlsconfig.Identity: URI SAN, then DNS
// SAN, then email, then CN) is commonName. The certificate is always valid
// for the loopback addresses too: "localhost" is added after the given DNS
// SANs, and 127.0.0.1 and ::1 as IP SANs. Use [CA.IssueClient] for a
// certificate carrying exactly the SANs given.
func (ca *CA) Issue(tb testing.TB, commonName string, dnsOrURISANs ...string) (certPEM, keyPEM []byte) {
	tb.Helper()
	tmpl := ca.template(tb, commonName, dnsOrURISANs)
	if len(tmpl.DNSNames) == 0 && len(tmpl.URIs) == 0 && commonName != "" {
		tmpl.DNSNames = []string{commonName}
	}
	tmpl.DNSNames = append(tmpl.DNSNames, "localhost")
	tmpl.IPAddresses = append(tmpl.IPAddresses, net.IPv4(127, 0, 0, 1), net.IPv6loopback)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	return ca.sign(tb, tmpl)
}

// IssueClient issues a client certificate (extended key usage clientAuth
// only) with exactly the SANs given, read as in [CA.Issue]; with none, its
// identity is its subject common name.
func (ca *CA) IssueClient(tb testing.TB, commonName string, sans ...string) (certPEM, keyPEM []byte) {
	tb.Helper()
	tmpl := ca.template(tb, commonName, sans)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return ca.sign(tb, tmpl)
}

// WriteFiles issues a certificate with [CA.Issue](t, name) and writes it to
// dir/name.crt and its key to dir/name.key (mode 0600).
func (ca *CA) WriteFiles(tb testing.TB, dir, name string) (certFile, keyFile string) {
	tb.Helper()
	certPEM, keyPEM := ca.Issue(tb, name)
	certFile = filepath.Join(dir, name+".crt")
	keyFile = filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		tb.Fatalf("tlstest: %v", err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		tb.Fatalf("tlstest: %v", err)
	}
	return certFile, keyFile
}

// WriteCAFile writes the CA certificate to dir/name.crt and returns the path.
func (ca *CA) WriteCAFile(tb testing.TB, dir, name string) string {
	tb.Helper()
	path := filepath.Join(dir, name+".crt")
	if err := os.WriteFile(path, ca.certPEM, 0o600); err != nil {
		tb.Fatalf("tlstest: %v", err)
	}
	return path
}

// ClientConfig returns a client TLS configuration that trusts the CA and
// presents a certificate issued by [CA.IssueClient](t, commonName, sans...).
func (ca *CA) ClientConfig(tb testing.TB, commonName string, sans ...string) *tls.Config {
	tb.Helper()
	certPEM, keyPEM := ca.IssueClient(tb, commonName, sans...)
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		RootCAs:      ca.Pool(),
		Certificates: []tls.Certificate{KeyPair(tb, certPEM, keyPEM)},
	}
}

// KeyPair parses a PEM certificate and key into a tls.Certificate.
func KeyPair(tb testing.TB, certPEM, keyPEM []byte) tls.Certificate {
	tb.Helper()
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		tb.Fatalf("tlstest: key pair: %v", err)
	}
	return pair
}

func (ca *CA) template(tb testing.TB, commonName string, sans []string) *x509.Certificate {
	tb.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: newSerial(tb),
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	for _, san := range sans {
		switch {
		case strings.Contains(san, "://"):
			u, err := url.Parse(san)
			if err != nil {
				tb.Fatalf("tlstest: URI SAN %q: %v", san, err)
			}
			tmpl.URIs = append(tmpl.URIs, u)
		case net.ParseIP(san) != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(san))
		case strings.Contains(san, "@"):
			tmpl.EmailAddresses = append(tmpl.EmailAddresses, san)
		default:
			tmpl.DNSNames = append(tmpl.DNSNames, san)
		}
	}
	return tmpl
}

func (ca *CA) sign(tb testing.TB, tmpl *x509.Certificate) (certPEM, keyPEM []byte) {
	tb.Helper()
	key := newKey(tb)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatalf("tlstest: create certificate: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatalf("tlstest: marshal key: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("tlstest: generate key: %v", err)
	}
	return key
}

func newSerial(tb testing.TB) *big.Int {
	tb.Helper()
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		tb.Fatalf("tlstest: serial: %v", err)
	}
	return serial.Add(serial, big.NewInt(1)) // never zero
}
