package authz

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluice-ml/sluice/internal/authz/authzspec"
)

// Credential headers (HTTP) and metadata keys (gRPC, lower-case there).
const (
	headerAuthorization = authzspec.HeaderAuthorization
	headerToken         = authzspec.HeaderToken
	mdAuthorization     = "authorization"
	mdToken             = "x-sluice-token" //nolint:gosec // G101: a metadata key, not a credential
)

// MaxCredentialBytes bounds a credential header's value; longer ones are
// refused unread.
const MaxCredentialBytes = 4 << 10

// Reasons of a *DeniedError.
const (
	// ReasonMissingCredential: the call needs a credential and carries none (401).
	ReasonMissingCredential = "missing_credential"
	// ReasonInvalidCredential: the credential matches no configured token, or
	// is malformed (401). A wrong credential is refused even where an
	// anonymous call would pass: it is a mistake worth reporting.
	ReasonInvalidCredential = "invalid_credential" //nolint:gosec // G101: a reason code, not a credential
	// ReasonInsufficientRole: a known credential whose role is too weak (403).
	ReasonInsufficientRole = "insufficient_role"
	// ReasonRestrictedAPI: a Triton restricted API group called without its
	// header, or with another value (403 over HTTP, Unavailable over gRPC,
	// as Triton answers).
	ReasonRestrictedAPI = "restricted_api"
)

// How a Principal was identified.
const (
	ViaToken = "token"
	ViaMTLS  = "mtls"
	ViaOpen  = "open"
)

// AnonymousID is the Principal.ID of a call let in without a credential.
const AnonymousID = "anonymous"

// DeniedError is the error Authorize and AuthorizeGRPC return. Status is the
// HTTP status (401 or 403); Message never holds the presented secret.
type DeniedError struct {
	Status  int
	Reason  string
	Message string
}

// Error returns the message, which names what is missing or wrong but
// never the presented secret.
func (d *DeniedError) Error() string { return d.Message }

// Principal is who made a call.
type Principal struct {
	// ID is the token's id, the client certificate's identity, or
	// AnonymousID.
	ID string
	// Role is the credential's role (RoleNone for an anonymous call or an
	// unmapped certificate).
	Role Role
	// Via is ViaToken, ViaMTLS or ViaOpen.
	Via string
	// Addr is the caller's network address, for the audit log: for a
	// proxied call the gateway vouched for, the client's address.
	Addr string
	// Client is the gateway client of a proxied call the gateway vouched
	// for (HeaderForwardedClient), and ProxyAddr the gateway's address;
	// both empty for a direct call.
	Client    string
	ProxyAddr string
}

// Proxied reports whether the call came through a gateway that vouched
// for its client.
func (pr Principal) Proxied() bool { return pr.ProxyAddr != "" }

// PolicyOptions configure a Policy.
type PolicyOptions struct {
	// Tokens are the accepted credentials.
	Tokens []Token
	// Restrictions are Triton restricted-API rules; a group may be in one
	// rule only.
	Restrictions []Restriction
	// OpenReads lets calls needing only RoleRead in without a credential
	// (a loopback admin port, or a feature server whose reads are open).
	OpenReads bool
	// OpenWrites lets calls needing RoleOperate (and so RoleRead) in without
	// a credential. Set it only for a loopback-only listener with no token
	// configured, so that a demo needs no set-up; NewPolicy refuses it
	// alongside tokens.
	OpenWrites bool
	// CertRoles maps a verified mTLS client identity (first URI SAN, else
	// DNS SAN, else email SAN, else subject CN) to a role. When empty,
	// client certificates identify nobody here.
	CertRoles map[string]string
	// ForwardedKey verifies HeaderForwardedClient (SignForwarded); empty:
	// the header is ignored. A call the gateway vouched for is its
	// client's: open writes never apply to it.
	ForwardedKey []byte
}

type tokenEntry struct {
	hash [sha256.Size]byte
	id   string
	role Role
}

// Policy decides who may do what on one listener. It is immutable after
// NewPolicy and safe for concurrent use.
type Policy struct {
	byHash     map[[sha256.Size]byte]*tokenEntry
	certRoles  map[string]Role
	restricted map[string]Restriction // group → its rule
	openReads  bool
	openWrites bool
	fwdKey     []byte
	now        func() time.Time
}

// NewPolicy validates o and builds a Policy. It reports every problem at
// once: an empty or duplicate id, a token_sha256 that is not 64 hex
// digits, a plain token left set, two tokens with one secret, a bad role,
// a bad restriction or a group in two restrictions, and OpenWrites with
// tokens configured.
func NewPolicy(o PolicyOptions) (*Policy, error) {
	p := &Policy{
		byHash:     make(map[[sha256.Size]byte]*tokenEntry, len(o.Tokens)),
		certRoles:  make(map[string]Role, len(o.CertRoles)),
		restricted: make(map[string]Restriction),
		openReads:  o.OpenReads || o.OpenWrites,
		openWrites: o.OpenWrites,
		fwdKey:     slices.Clone(o.ForwardedKey),
		now:        time.Now,
	}
	tokens, err := authzspec.ParseTokens(o.Tokens)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, t := range tokens {
		p.byHash[t.Hash] = &tokenEntry{hash: t.Hash, id: t.ID, role: t.Role}
	}
	for ident, r := range o.CertRoles {
		if ident == "" {
			errs = append(errs, errors.New("cert_roles: empty identity"))
			continue
		}
		role, err := ParseRole(r)
		if err != nil {
			errs = append(errs, fmt.Errorf("cert_roles[%q]: %w", ident, err))
			continue
		}
		p.certRoles[ident] = role
	}
	for _, r := range o.Restrictions {
		if err := r.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("restriction %s: %w", r, err))
			continue
		}
		for _, g := range r.Groups {
			if _, dup := p.restricted[g]; dup {
				errs = append(errs, fmt.Errorf("restricted API group %q can not be in more than one restriction", g))
				continue
			}
			p.restricted[g] = r
		}
	}
	if o.OpenWrites && len(o.Tokens) > 0 {
		errs = append(errs, errors.New("open writes with tokens configured: a listener with operators' tokens must not take anonymous writes"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// Empty reports whether no token and no certificate role is configured:
// nobody can present a credential, so only open calls can pass.
func (p *Policy) Empty() bool { return len(p.byHash) == 0 && len(p.certRoles) == 0 }

// Restricted returns the restriction covering group, if any.
func (p *Policy) Restricted(group string) (Restriction, bool) {
	r, ok := p.restricted[group]
	return r, ok
}

// Authorize checks one HTTP request needing role need and, when group is
// not "", the group's Triton restriction. The credential is
// "Authorization: Bearer <token>" (which wins) or "X-Sluice-Token: <token>";
// failing those, a verified client certificate mapped by CertRoles.
//
// On success it returns the caller. On failure the error is a *DeniedError and
// the Principal holds what is known of the caller (always Addr; ID and Via
// when a valid credential lacked the role), for the audit log.
func (p *Policy) Authorize(r *http.Request, need Role, group string) (Principal, error) {
	c := presented{
		authorization: r.Header.Get(headerAuthorization),
		token:         r.Header.Get(headerToken),
		tls:           r.TLS,
		addr:          r.RemoteAddr,
	}
	if v := r.Header.Get(HeaderForwardedClient); v != "" && len(p.fwdKey) > 0 {
		c.forwarded, c.requestID = v, r.Header.Get("X-Request-Id")
	}
	return p.decide(c, need, group, func(key string) (string, bool, string) {
		vals := r.Header.Values(key)
		msg := "This API is restricted, expecting header '" + key + "'"
		if len(vals) == 0 {
			return "", false, msg
		}
		return vals[0], true, msg
	})
}

// AuthorizeGRPC is Authorize for a gRPC call: the credential comes from
// metadata "authorization" or "x-sluice-token", the restriction value from
// metadata GRPCRestrictionPrefix+key (as Triton names it), the client
// certificate from the peer's TLS state. The error is a *DeniedError; GRPCError
// turns it into a gRPC status.
func (p *Policy) AuthorizeGRPC(ctx context.Context, need Role, group string) (Principal, error) {
	// ValueFromIncomingContext reads one key without copying the whole
	// metadata, as FromIncomingContext does on every call.
	c := presented{authorization: firstValue(ctx, mdAuthorization), token: firstValue(ctx, mdToken)}
	if pr, ok := peer.FromContext(ctx); ok {
		if pr.Addr != nil {
			c.addr = pr.Addr.String()
		}
		if info, ok := pr.AuthInfo.(credentials.TLSInfo); ok {
			c.tls = &info.State
		}
	}
	return p.decide(c, need, group, func(key string) (string, bool, string) {
		name := GRPCRestrictionPrefix + strings.ToLower(key)
		vals := metadata.ValueFromIncomingContext(ctx, name)
		msg := "This protocol is restricted, expecting header '" + name + "'"
		if len(vals) == 0 {
			return "", false, msg
		}
		return vals[0], true, msg
	})
}

func firstValue(ctx context.Context, key string) string {
	if vals := metadata.ValueFromIncomingContext(ctx, key); len(vals) > 0 {
		return vals[0]
	}
	return ""
}

// presented is what one call carries, from HTTP headers or gRPC metadata.
type presented struct {
	authorization string
	token         string
	tls           *tls.ConnectionState
	addr          string
	// forwarded is a HeaderForwardedClient value to verify, with the
	// request id it is bound to.
	forwarded, requestID string
}

// restrictedValue returns the value of the restriction header named by key,
// whether it was present, and the message to refuse with.
type restrictedValue func(key string) (value string, present bool, msg string)

// credential states.
const (
	credNone    = iota // nothing presented
	credValid          // a token or mapped certificate
	credInvalid        // presented, but unknown or malformed
)

func (p *Policy) decide(c presented, need Role, group string, restricted restrictedValue) (Principal, error) {
	pr := Principal{Addr: c.addr}
	if c.forwarded != "" {
		f, err := VerifyForwarded(p.fwdKey, c.forwarded, c.requestID, p.now())
		if err != nil {
			return pr, &DeniedError{Status: http.StatusUnauthorized, Reason: ReasonInvalidForwarded, Message: "the forwarded client identity does not verify"}
		}
		pr.Client, pr.Addr, pr.ProxyAddr = f.Client, f.Addr, c.addr
		pr.ID, pr.Via = f.Client, ViaGateway // unless a credential of its own says more
	}
	// Triton checks a restricted group before anything else; so do we.
	if rule, ok := p.restricted[group]; ok && group != "" {
		v, present, msg := restricted(rule.Key)
		if !present || subtle.ConstantTimeCompare([]byte(v), []byte(rule.Value)) != 1 {
			return pr, &DeniedError{Status: http.StatusForbidden, Reason: ReasonRestrictedAPI, Message: msg}
		}
	}
	state := p.identify(c, &pr)
	switch state {
	case credInvalid:
		return pr, &DeniedError{Status: http.StatusUnauthorized, Reason: ReasonInvalidCredential, Message: "the credential is not valid"}
	case credNone:
		if p.openTo(need, pr) {
			if !pr.Proxied() {
				pr.ID, pr.Via = AnonymousID, ViaOpen
			}
			return pr, nil
		}
		return pr, &DeniedError{
			Status: http.StatusUnauthorized, Reason: ReasonMissingCredential,
			Message: "this call needs a credential with role " + need.String() +
				": send 'Authorization: Bearer <token>' or 'X-Sluice-Token: <token>'",
		}
	}
	// A caller with a credential gets at least what an anonymous one would.
	if pr.Role >= need || p.openTo(need, pr) {
		return pr, nil
	}
	what := "token"
	if pr.Via == ViaMTLS {
		what = "client certificate"
	}
	return pr, &DeniedError{
		Status: http.StatusForbidden, Reason: ReasonInsufficientRole,
		Message: fmt.Sprintf("%s %q has role %s; this call needs %s", what, pr.ID, pr.Role, need),
	}
}

// openTo reports whether pr's call needing need may pass without a
// credential: never a write the gateway proxied (the listener's open
// writes are for local processes, and the gateway's client is not one).
func (p *Policy) openTo(need Role, pr Principal) bool {
	if pr.Proxied() && need >= RoleOperate {
		return false
	}
	return p.open(need)
}

// open reports whether a call needing need may pass without a credential.
func (p *Policy) open(need Role) bool {
	switch need {
	case RoleNone:
		return true
	case RoleRead:
		return p.openReads
	default:
		return p.openWrites
	}
}

// identify finds the credential c presents and fills pr's ID, Role and Via
// when it is valid. A bearer Authorization header wins over X-Sluice-Token,
// and a token over a client certificate; an Authorization header with
// another scheme is ignored.
func (p *Policy) identify(c presented, pr *Principal) int {
	if len(p.byHash) == 0 {
		// No tokens here: a bearer credential is meant for someone else
		// (a proxy in front, a KServe client's default headers), so it
		// neither helps nor hurts; only a client certificate can count.
		return p.identifyCert(c, pr)
	}
	secret, ok := "", false
	switch tok, state := authorizationToken(c.authorization); state {
	case credValid:
		secret, ok = tok, true
	case credInvalid:
		return credInvalid
	}
	if !ok && strings.Trim(c.token, " \t") != "" {
		if secret, ok = cleanToken(c.token); !ok {
			return credInvalid
		}
	}
	if ok {
		sum := sha256.Sum256([]byte(secret))
		e, found := p.byHash[sum]
		// The map lookup finds the candidate; the constant-time comparison
		// is the check, so it does not rest on how a map compares keys.
		if !found || subtle.ConstantTimeCompare(sum[:], e.hash[:]) != 1 {
			return credInvalid
		}
		pr.ID, pr.Role, pr.Via = e.id, e.role, ViaToken
		return credValid
	}
	return p.identifyCert(c, pr)
}

// identifyCert maps a verified client certificate to its role.
func (p *Policy) identifyCert(c presented, pr *Principal) int {
	if len(p.certRoles) == 0 || c.tls == nil || len(c.tls.VerifiedChains) == 0 || len(c.tls.VerifiedChains[0]) == 0 {
		return credNone
	}
	ident := certIdentity(c.tls.VerifiedChains[0][0])
	if ident == "" {
		return credNone
	}
	pr.ID, pr.Role, pr.Via = ident, p.certRoles[ident], ViaMTLS // an unmapped identity has RoleNone
	return credValid
}

// authorizationToken reads an Authorization header value: credNone when it
// is absent, empty, or of another scheme; credInvalid when it is a bearer
// credential that ParseBearer refuses.
func authorizationToken(h string) (string, int) {
	if h == "" {
		return "", credNone
	}
	if tok, ok := ParseBearer(h); ok {
		return tok, credValid
	}
	if len(h) > MaxCredentialBytes {
		return "", credInvalid
	}
	scheme, rest := splitScheme(h)
	if !strings.EqualFold(scheme, "Bearer") || rest == "" {
		return "", credNone
	}
	return "", credInvalid
}

// ParseBearer extracts the token from an Authorization header value
// "Bearer <token>": the scheme is case-insensitive, blanks around the value
// and between scheme and token are trimmed. It refuses another scheme, an
// empty token, a control character and a value over MaxCredentialBytes.
func ParseBearer(header string) (token string, ok bool) {
	if len(header) > MaxCredentialBytes {
		return "", false
	}
	scheme, rest := splitScheme(header)
	if !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return cleanToken(rest)
}

// splitScheme splits an Authorization value into its scheme and the rest,
// both trimmed of spaces and tabs.
func splitScheme(h string) (scheme, rest string) {
	h = strings.Trim(h, " \t")
	i := strings.IndexAny(h, " \t")
	if i < 0 {
		return h, ""
	}
	return h[:i], strings.Trim(h[i:], " \t")
}

// cleanToken trims a raw token of spaces and tabs and refuses an empty or
// over-long one or one with a control character.
func cleanToken(s string) (string, bool) {
	if len(s) > MaxCredentialBytes {
		return "", false
	}
	s = strings.Trim(s, " \t")
	if s == "" || authzspec.HasControl(s) {
		return "", false
	}
	return s, true
}

// certIdentity is a verified client certificate's identity: the first URI
// SAN, else the first DNS SAN, else the first email SAN, else the subject
// CN; "" when it has none. It follows tlsconfig.Identity's rule (that
// package was not in the tree when this one was written).
func certIdentity(c *x509.Certificate) string {
	switch {
	case len(c.URIs) > 0:
		return c.URIs[0].String()
	case len(c.DNSNames) > 0:
		return c.DNSNames[0]
	case len(c.EmailAddresses) > 0:
		return c.EmailAddresses[0]
	default:
		return c.Subject.CommonName
	}
}
