// Package tlsconfig gives every Sluice listener TLS 1.2+ and optional mTLS
// from PEM files that are reloaded when they change, derives the client
// identity from a verified client certificate, and builds TLS
// configurations for outbound connections (remote model servers, Redis,
// NATS).
//
// # Listeners
//
// [ServerOptions] is the tls: block of a listener. [NewServer] validates it
// and loads the files; [Server.Config] (for http.Server.TLSConfig or gRPC's
// credentials.NewTLS) and [Server.Listener] serve them. Client
// certificates are only asked for together with client_ca_file, which
// they are verified against: client_auth "require" (the default then)
// refuses a client without a valid certificate, "request" serves it with
// an empty identity but still refuses an invalid certificate. Go's
// default cipher suites apply; ALPN offers h2 and http/1.1.
//
// # Reload semantics
//
// Every handshake is handed, through tls.Config.GetConfigForClient, the
// material loaded last: certificate chain, key and client CA pool change
// together, for new connections only; open connections keep the session
// they negotiated. A resumed TLS session is re-checked by crypto/tls
// against the current client CA pool, so removing a CA also ends the
// resumption of sessions it authenticated.
//
// [Server.Run] polls the files every [Server.Interval] (1 s by default)
// and compares SHA-256 hashes of their content with what is served. Hashes
// rather than modification times or inotify events catch every way the
// files change: an in-place rewrite (even one that keeps the mtime), a
// rename over the file, and the atomic swap of a Kubernetes secret
// volume's ..data symlink, which changes no watched file's own metadata
// (Envoy's watched_directory exists to catch that case; polling the
// content needs no directory to configure). The files are read as one
// version: the certificate is read again after the key and CA bundle, and
// the read is repeated when it changed in between, so a symlink swap is
// never half seen.
//
// A version that does not load (unreadable file, PEM cut short, key not
// matching the certificate, empty CA bundle) never replaces the served
// one. Run gives a writer one more interval to finish: content that fails
// to load is reported (a warning, and result="error" in
// sluice_tls_reloads_total) only when the next poll finds it unchanged,
// and then only once; any change is tried again. This avoids false alarms while a
// tool writes the certificate and then the key, and still flags a file
// left broken. [Server.Reload] (for SIGHUP or an admin endpoint) loads
// at once and reports a failure immediately.
//
// Compared with the anchors: Prometheus's exporter-toolkit and etcd read
// the key pair again during each new connection's handshake, so a broken
// or half-written file fails handshakes instead of leaving the last good
// certificate in service, and no metric tells it happened.
//
// # Client identity
//
// [Identity] (and [HTTPIdentity], [GRPCIdentity]) returns the identity of
// a client whose certificate chain was verified: the certificate's first
// URI SAN (e.g. a SPIFFE ID), else its first DNS SAN, else its first
// email SAN, else its subject common name ([CertIdentity]). Without a
// verified chain it is "", so an identity is always authenticated. The
// gateway uses it as the client_id.
//
// # Outbound connections
//
// [ClientOptions.Config] reads the CA bundle once (empty means the system
// roots) and re-reads the client certificate pair lazily, at most once a
// second, at handshake time, keeping the previous pair when the new one
// does not load. insecure_skip_verify is allowed and reported by
// [ClientOptions.Warnings].
//
// # Parsing
//
// [ParseKeyPair] and [ParseCAPool] are the parsers of untrusted PEM input
// (fuzzed): stricter than crypto/tls and crypto/x509, they refuse
// truncated PEM blocks, certificates that do not parse and empty
// bundles, rather than skipping them, and bound their input to 4 MiB.
//
// # Metrics
//
//	sluice_tls_reloads_total{listener,result="success|error"}
//	sluice_tls_certificate_expiry_timestamp_seconds{listener}
//
// The listener label is the listener name given to [NewServer]; every
// listener of a process shares one [Metrics].
package tlsconfig
