package tlsconfig

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

const (
	// maxPEMSize bounds every PEM input: a file read from disk and the
	// input of the parsers. The Mozilla root bundle is about 220 KiB.
	maxPEMSize = 4 << 20
	// maxChain bounds the certificates of a cert_file chain.
	maxChain = 16
)

// pairError says which half of a key pair is at fault.
type pairError struct {
	part string // "cert", "key" or "pair" (they do not match)
	err  error
}

func (e *pairError) Error() string {
	switch e.part {
	case "cert":
		return "certificate: " + e.err.Error()
	case "key":
		return "private key: " + e.err.Error()
	default:
		return e.err.Error()
	}
}

func (e *pairError) Unwrap() error { return e.err }

// inFiles rewords e for a pair read from files, naming the file at fault.
func (e *pairError) inFiles(certFile, keyFile string) error {
	switch e.part {
	case "cert":
		return fmt.Errorf("parse cert_file %s: %w", certFile, e.err)
	case "key":
		return fmt.Errorf("parse key_file %s: %w", keyFile, e.err)
	default:
		return fmt.Errorf("key_file %s does not match cert_file %s: %w", keyFile, certFile, e.err)
	}
}

// ParseKeyPair parses a PEM certificate chain (leaf first) and its PEM
// private key (PKCS#8, PKCS#1 or SEC 1) into a certificate with Leaf set.
// Unlike tls.X509KeyPair it refuses a PEM block it cannot decode (a
// truncated, half-written file) instead of skipping it, parses every
// certificate of the chain, refuses encrypted keys, and says which file
// is probably at fault. Inputs over 4 MiB are refused.
func ParseKeyPair(certPEM, keyPEM []byte) (tls.Certificate, error) {
	cert, err := parseKeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, err
	}
	return cert, nil
}

func parseKeyPair(certPEM, keyPEM []byte) (tls.Certificate, *pairError) {
	certs, err := parseCertificates(certPEM, maxChain)
	if err != nil {
		return tls.Certificate{}, &pairError{part: "cert", err: err}
	}
	key, err := parsePrivateKey(keyPEM)
	if err != nil {
		return tls.Certificate{}, &pairError{part: "key", err: err}
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(certs[0].PublicKey) {
		return tls.Certificate{}, &pairError{part: "pair", err: errors.New("private key does not match the certificate's public key")}
	}
	chain := make([][]byte, len(certs))
	for i, c := range certs {
		chain[i] = c.Raw
	}
	return tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: certs[0]}, nil
}

// ParseCAPool parses a PEM bundle of CA certificates into a pool. It fails
// when the bundle holds no certificate, when a certificate does not parse,
// and when a PEM block cannot be decoded (x509.CertPool.AppendCertsFromPEM
// skips all three silently). Blocks of other types are ignored. Inputs
// over 4 MiB are refused.
func ParseCAPool(pemData []byte) (*x509.CertPool, error) {
	certs, err := parseCertificates(pemData, -1)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

// parseCertificates returns the CERTIFICATE blocks of data, parsed, in
// order; at most limit of them unless limit is negative.
func parseCertificates(data []byte, limit int) ([]*x509.Certificate, error) {
	blocks, err := decodePEM(data)
	if err != nil {
		return nil, err
	}
	var certs []*x509.Certificate
	sawKey := false
	for _, b := range blocks {
		switch {
		case b.Type == "CERTIFICATE":
			if limit >= 0 && len(certs) == limit {
				return nil, fmt.Errorf("more than %d certificates", limit)
			}
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
			}
			certs = append(certs, c)
		case strings.HasSuffix(b.Type, "PRIVATE KEY"):
			sawKey = true
		}
	}
	if len(certs) == 0 {
		if sawKey {
			return nil, errors.New("no CERTIFICATE block, only a private key (cert and key files swapped?)")
		}
		return nil, errors.New("no CERTIFICATE block found")
	}
	return certs, nil
}

// parsePrivateKey returns the first private key block of data.
func parsePrivateKey(data []byte) (crypto.Signer, error) {
	blocks, err := decodePEM(data)
	if err != nil {
		return nil, err
	}
	sawCert := false
	for _, b := range blocks {
		if b.Type == "CERTIFICATE" {
			sawCert = true
			continue
		}
		if !strings.HasSuffix(b.Type, "PRIVATE KEY") {
			continue // e.g. the EC PARAMETERS block openssl ecparam writes first
		}
		if b.Type == "ENCRYPTED PRIVATE KEY" || strings.Contains(b.Headers["Proc-Type"], "ENCRYPTED") {
			return nil, errors.New("encrypted private keys are not supported")
		}
		return parseKeyDER(b.Bytes)
	}
	if sawCert {
		return nil, errors.New("no PRIVATE KEY block, only certificates (cert and key files swapped?)")
	}
	return nil, errors.New("no PRIVATE KEY block found")
}

// parseKeyDER tries the three encodings in the order crypto/tls does, as
// block types are often mislabelled.
func parseKeyDER(der []byte) (crypto.Signer, error) {
	if key, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return key, nil
	}
	if key, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("unsupported key type %T", key)
		}
		return signer, nil
	}
	if key, err := x509.ParseECPrivateKey(der); err == nil {
		return key, nil
	}
	return nil, errors.New("unparseable key (want PKCS#8, PKCS#1 or SEC 1)")
}

// decodePEM decodes every PEM block of data. A "-----BEGIN" that does not
// start a well-formed block (a file cut short mid-write, a damaged block
// that pem.Decode would skip) is an error.
func decodePEM(data []byte) ([]*pem.Block, error) {
	if len(data) > maxPEMSize {
		return nil, fmt.Errorf("larger than %d bytes", maxPEMSize)
	}
	var blocks []*pem.Block
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		blocks = append(blocks, b)
	}
	if begins := bytes.Count(data, []byte("-----BEGIN")); begins != len(blocks) {
		return nil, fmt.Errorf("malformed or truncated PEM block (%d begun, %d complete)", begins, len(blocks))
	}
	return blocks, nil
}

// readPEMFile reads a file of at most maxPEMSize bytes. The error names
// the path.
func readPEMFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPEMSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxPEMSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxPEMSize)
	}
	return data, nil
}
