package tlsconfig

import (
	"bytes"
	"crypto"
	"testing"

	"github.com/sluice-ml/sluice/internal/tlsconfig/tlstest"
)

func FuzzParseKeyPair(f *testing.F) {
	ca := tlstest.NewCA(f)
	certPEM, keyPEM := ca.Issue(f, "server", "spiffe://sluice/server")
	chain := append(append([]byte(nil), certPEM...), ca.CertPEM()...)
	f.Add(certPEM, keyPEM)
	f.Add(chain, keyPEM)
	f.Add(certPEM[:len(certPEM)/2], keyPEM)
	f.Add(certPEM, keyPEM[:len(keyPEM)-30])
	f.Add(keyPEM, certPEM)
	f.Add([]byte("garbage"), []byte("-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n"))
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, certPEM, keyPEM []byte) {
		cert, err := ParseKeyPair(certPEM, keyPEM)
		if err != nil {
			return // rejecting input is fine; panicking or hanging is not
		}
		if cert.Leaf == nil || len(cert.Certificate) == 0 || !bytes.Equal(cert.Leaf.Raw, cert.Certificate[0]) {
			t.Fatalf("accepted pair without a consistent leaf: %+v", cert)
		}
		if _, ok := cert.PrivateKey.(crypto.Signer); !ok {
			t.Fatalf("accepted key %T that cannot sign", cert.PrivateKey)
		}
	})
}

func FuzzParseCAPool(f *testing.F) {
	ca, other := tlstest.NewCA(f), tlstest.NewCA(f)
	bundle := append(ca.CertPEM(), other.CertPEM()...)
	f.Add(ca.CertPEM())
	f.Add(bundle)
	f.Add(bundle[:len(bundle)-40])
	f.Add([]byte("# comment\n" + string(ca.CertPEM())))
	f.Add([]byte("garbage"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		pool, err := ParseCAPool(data)
		if err != nil {
			return
		}
		if pool == nil {
			t.Fatal("nil pool without an error")
		}
		certs, err := parseCertificates(data, -1)
		if err != nil || len(certs) == 0 {
			t.Fatalf("ParseCAPool accepted what parseCertificates refuses: %v", err)
		}
	})
}
