// Package auth identifies the API client behind a gateway request.
//
// A client presents its API key either as "Authorization: Bearer <key>" or
// as "x-api-key: <key>" (the Authorization header wins when both are set).
// The gateway never stores keys: the configuration holds the hex SHA-256 of
// each key. Authenticate hashes the presented key, finds the candidate client
// in a map keyed by that hash, and confirms the match with a constant-time
// comparison, so the check costs O(1) whatever the number of clients.
//
// A request without a key is rejected with 401 and reason "missing_api_key"
// unless anonymous access is allowed, in which case it gets the anonymous
// identity. A request with a key that matches no client is always rejected
// with 401 and reason "invalid_api_key", even when anonymous access is
// allowed: a wrong key is a mistake worth reporting, not an anonymous call.
// Keys are never logged or echoed in error messages.
//
// Over mTLS, a verified client certificate whose identity (tlsconfig.Identity:
// first URI SAN, else DNS SAN, else email SAN, else subject CN) is a client's
// tls_identity identifies that client without a key. A request carrying both
// a key and such a certificate must name the same client with both, else it
// is refused with "credential_mismatch".
package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/tlsconfig"
)

// AnonymousClientID is the client_id of requests served without a key.
const AnonymousClientID = "anonymous"

// Reasons of the errors Authenticate returns.
const (
	ReasonMissingAPIKey = "missing_api_key"
	ReasonInvalidAPIKey = "invalid_api_key"
	// ReasonCredentialMismatch: the API key and the verified client
	// certificate identify different clients.
	ReasonCredentialMismatch = "credential_mismatch" //nolint:gosec // G101: a reason code, not a credential
)

// Identity is the caller of a request.
type Identity struct {
	// ClientID is the configured client id, or AnonymousClientID.
	ClientID string
	// Anonymous is true when the request carried no key and anonymous access is allowed.
	Anonymous bool
	// Priority is the client's configured model priority (0 = default).
	Priority int
}

type client struct {
	hash     [sha256.Size]byte
	id       string
	priority int
}

// Authenticator maps API keys to client identities. It is immutable after
// New and safe for concurrent use.
type Authenticator struct {
	byHash     map[[sha256.Size]byte]*client
	byIdentity map[string]*client // verified client-certificate identity → client
	anonymous  bool
}

// New builds an Authenticator from the configured clients. It fails when a
// client's api_key_sha256 is not 64 hex digits, or when two clients share an
// id or a key hash.
func New(clients []config.Client, anonymousAllowed bool) (*Authenticator, error) {
	a := &Authenticator{
		byHash: make(map[[sha256.Size]byte]*client, len(clients)), byIdentity: map[string]*client{},
		anonymous: anonymousAllowed,
	}
	ids := make(map[string]bool, len(clients))
	for i, c := range clients {
		if c.ID == "" {
			return nil, fmt.Errorf("client %d: empty id", i)
		}
		if ids[c.ID] {
			return nil, fmt.Errorf("client %q: duplicate id", c.ID)
		}
		ids[c.ID] = true
		cl := &client{id: c.ID, priority: c.Priority}
		if c.TLSIdentity != "" {
			if other, dup := a.byIdentity[c.TLSIdentity]; dup {
				return nil, fmt.Errorf("clients %q and %q: same tls_identity", other.id, c.ID)
			}
			a.byIdentity[c.TLSIdentity] = cl
			if c.APIKeySHA256 == "" {
				continue
			}
		}
		raw, err := hex.DecodeString(strings.TrimSpace(c.APIKeySHA256))
		if err != nil || len(raw) != sha256.Size {
			return nil, fmt.Errorf("client %q: api_key_sha256 must be %d hex digits", c.ID, 2*sha256.Size)
		}
		copy(cl.hash[:], raw)
		if other, dup := a.byHash[cl.hash]; dup {
			return nil, fmt.Errorf("clients %q and %q: same api key", other.id, c.ID)
		}
		a.byHash[cl.hash] = cl
	}
	return a, nil
}

// Authenticate returns the identity of the request's caller, or a
// KindUnauthenticated error with reason ReasonMissingAPIKey or
// ReasonInvalidAPIKey.
func (a *Authenticator) Authenticate(r *http.Request) (Identity, *apierr.Error) {
	return a.Identify(r.Header, r.TLS)
}

// Identify is Authenticate for a caller known by its headers (or gRPC
// metadata, with canonical keys) and its verified TLS state, nil over
// plaintext.
func (a *Authenticator) Identify(h http.Header, state *tls.ConnectionState) (Identity, *apierr.Error) {
	key := apiKey(h)
	var byCert *client
	if state != nil && len(a.byIdentity) > 0 {
		byCert = a.byIdentity[tlsconfig.Identity(state)]
	}
	if key == "" {
		if byCert != nil {
			return Identity{ClientID: byCert.id, Priority: byCert.priority}, nil
		}
		if a.anonymous {
			return Identity{ClientID: AnonymousClientID, Anonymous: true}, nil
		}
		return Identity{}, apierr.Errorf(apierr.KindUnauthenticated, ReasonMissingAPIKey,
			"an API key is required: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'")
	}
	sum := sha256.Sum256([]byte(key))
	c, ok := a.byHash[sum]
	// The map lookup finds the candidate; the constant-time comparison is
	// the actual check, so it does not depend on how a map compares keys.
	if !ok || subtle.ConstantTimeCompare(sum[:], c.hash[:]) != 1 {
		return Identity{}, apierr.Errorf(apierr.KindUnauthenticated, ReasonInvalidAPIKey, "the API key is not valid")
	}
	if byCert != nil && byCert != c {
		// Two credentials naming two clients: refuse rather than guess.
		return Identity{}, apierr.Errorf(apierr.KindUnauthenticated, ReasonCredentialMismatch,
			"the API key and the client certificate belong to different clients")
	}
	return Identity{ClientID: c.id, Priority: c.priority}, nil
}

// HashKey returns the hex SHA-256 of an API key, the form api_key_sha256 takes.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// apiKey extracts the key from "Authorization: Bearer <key>" or, failing
// that, from "x-api-key". An Authorization header with another scheme is
// ignored.
func apiKey(h http.Header) string {
	if v := h.Get("Authorization"); v != "" {
		scheme, token, ok := strings.Cut(strings.TrimSpace(v), " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			if k := strings.TrimSpace(token); k != "" {
				return k
			}
		}
	}
	return strings.TrimSpace(h.Get("X-Api-Key"))
}
