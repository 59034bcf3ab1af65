package tlsconfig

import "github.com/sluice-ml/sluice/internal/tlsconfig/tlsspec"

// Client authentication modes of [ServerOptions.ClientAuth].
const (
	ClientAuthNone    = tlsspec.ClientAuthNone
	ClientAuthRequest = tlsspec.ClientAuthRequest
	ClientAuthRequire = tlsspec.ClientAuthRequire
)

// ServerOptions is the tls: block of one listener in sluice.yaml; the type
// and its checks live in the leaf package tlsspec, which config embeds.
type ServerOptions = tlsspec.ServerOptions

// ClientOptions configures TLS for an outbound connection: remote model
// servers, Redis, NATS (see tlsspec).
type ClientOptions = tlsspec.ClientOptions
