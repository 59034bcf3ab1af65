// Package tlsspec is how sluice.yaml and the command line write TLS: a
// listener's tls: block (ServerOptions) and an outbound connection's
// (ClientOptions), with the checks that need no file. Package tlsconfig
// turns them into live, reloading TLS; package config embeds them. It
// imports only the standard library, so that config stays data.
package tlsspec

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
)

// Client authentication modes of [ServerOptions.ClientAuth].
const (
	// ClientAuthNone asks no client certificate.
	ClientAuthNone = "none"
	// ClientAuthRequest asks for a client certificate and verifies it
	// against client_ca_file when one is presented; a client without one
	// is served, with an empty identity.
	ClientAuthRequest = "request"
	// ClientAuthRequire refuses the handshake unless the client presents a
	// certificate that verifies against client_ca_file. It is the default
	// when client_ca_file is set.
	ClientAuthRequire = "require"
)

// ServerOptions is the tls: block of one listener in sluice.yaml.
type ServerOptions struct {
	// CertFile is the PEM certificate chain: the leaf first, then any
	// intermediates.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM private key of the leaf (PKCS#8, PKCS#1 or SEC 1;
	// not encrypted).
	KeyFile string `yaml:"key_file"`
	// ClientCAFile is a PEM CA bundle; when set, client certificates are
	// verified against it (mTLS).
	ClientCAFile string `yaml:"client_ca_file"`
	// ClientAuth is "none", "request" (verify if presented) or "require"
	// (the default when client_ca_file is set).
	ClientAuth string `yaml:"client_auth"`
	// MinVersion is "1.2" (the default) or "1.3".
	MinVersion string `yaml:"min_version"`
}

// Enabled reports whether the listener serves TLS: cert_file or key_file
// is set.
func (o ServerOptions) Enabled() bool { return o.CertFile != "" || o.KeyFile != "" }

// Validate checks the options without reading the files; each message
// names the field at fault, and all problems are reported at once.
func (o ServerOptions) Validate() error {
	var errs []error
	if !o.Enabled() {
		var set []string
		for _, f := range []struct{ name, value string }{
			{"client_ca_file", o.ClientCAFile}, {"client_auth", o.ClientAuth}, {"min_version", o.MinVersion},
		} {
			if f.value != "" {
				set = append(set, f.name)
			}
		}
		if len(set) > 0 {
			return fmt.Errorf("cert_file: required with %s (tls is off without cert_file and key_file)", strings.Join(set, ", "))
		}
		return nil
	}
	if o.KeyFile == "" {
		errs = append(errs, errors.New("key_file: required with cert_file"))
	}
	if o.CertFile == "" {
		errs = append(errs, errors.New("cert_file: required with key_file"))
	}
	switch o.ClientAuth {
	case "":
	case ClientAuthNone:
		if o.ClientCAFile != "" {
			errs = append(errs, errors.New(`client_auth: "none" contradicts client_ca_file (remove one)`))
		}
	case ClientAuthRequest, ClientAuthRequire:
		if o.ClientCAFile == "" {
			errs = append(errs, fmt.Errorf("client_auth: %q needs client_ca_file (the CAs client certificates are verified against)", o.ClientAuth))
		}
	default:
		errs = append(errs, fmt.Errorf("client_auth: %q unknown (want none, request or require)", o.ClientAuth))
	}
	if _, err := o.TLSMinVersion(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Describe says how the listener is secured, for the startup banner: "off",
// "tls", "mtls (client cert required)" or "mtls (client cert optional)".
func (o ServerOptions) Describe() string {
	switch {
	case !o.Enabled():
		return "off"
	case o.ClientCAFile == "" || o.ClientAuth == ClientAuthNone:
		return "tls"
	case o.ClientAuth == ClientAuthRequest:
		return "mtls (client cert optional)"
	default:
		return "mtls (client cert required)"
	}
}

// ClientAuthType maps validated options to crypto/tls. Client certificates
// are only ever asked for together with a CA pool to verify them against:
// Go's VerifyClientCertIfGiven with a nil pool would trust the system roots.
func (o ServerOptions) ClientAuthType() tls.ClientAuthType {
	switch {
	case o.ClientCAFile == "" || o.ClientAuth == ClientAuthNone:
		return tls.NoClientCert
	case o.ClientAuth == ClientAuthRequest:
		return tls.VerifyClientCertIfGiven
	default:
		return tls.RequireAndVerifyClientCert
	}
}

// TLSMinVersion is MinVersion as a crypto/tls version: TLS 1.2 unless
// "1.3" is asked for.
func (o ServerOptions) TLSMinVersion() (uint16, error) {
	switch s := o.MinVersion; s {
	case "", "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	default:
		return 0, fmt.Errorf(`min_version: %q not supported (want "1.2" or "1.3")`, s)
	}
}

// ClientOptions configures TLS for an outbound connection: remote model
// servers, Redis, NATS.
type ClientOptions struct {
	// CAFile is the PEM bundle of CAs the server certificate is verified
	// against; empty means the system roots.
	CAFile string `yaml:"ca_file"`
	// CertFile is the client certificate chain presented for mTLS
	// (optional; needs KeyFile).
	CertFile string `yaml:"cert_file"`
	// KeyFile is the private key of CertFile.
	KeyFile string `yaml:"key_file"`
	// ServerName is the name the server certificate must carry; empty
	// means the host of the dialled address.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any server certificate. It is allowed
	// for tests and migrations, and reported by [ClientOptions.Warnings].
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// Enabled reports whether any field is set, i.e. the connection uses TLS.
func (o ClientOptions) Enabled() bool {
	return o.CAFile != "" || o.CertFile != "" || o.KeyFile != "" || o.ServerName != "" || o.InsecureSkipVerify
}

// Validate checks the options without reading the files.
func (o ClientOptions) Validate() error {
	var errs []error
	if o.CertFile != "" && o.KeyFile == "" {
		errs = append(errs, errors.New("key_file: required with cert_file"))
	}
	if o.KeyFile != "" && o.CertFile == "" {
		errs = append(errs, errors.New("cert_file: required with key_file"))
	}
	return errors.Join(errs...)
}

// Warnings returns what is allowed but unsafe, one line each, for the
// caller to log at startup and for "sluice check" to print.
func (o ClientOptions) Warnings() []string {
	var w []string
	if o.InsecureSkipVerify {
		w = append(w, "insecure_skip_verify: the server certificate is not verified; anyone on the path can impersonate the server")
		if o.CAFile != "" {
			w = append(w, "ca_file: ignored with insecure_skip_verify")
		}
		if o.ServerName != "" {
			w = append(w, "server_name: not checked with insecure_skip_verify")
		}
	}
	return w
}
