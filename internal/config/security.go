package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/sluice-ml/sluice/internal/admission/limitspec"
	"github.com/sluice-ml/sluice/internal/authz/authzspec"
	"github.com/sluice-ml/sluice/internal/tlsconfig/tlsspec"
)

// Security is the process-wide security section: the operator tokens that
// every state-changing API accepts, the audit log and the memory budget.
type Security struct {
	// Tokens are the operator credentials (bearer tokens, stored as their
	// SHA-256) accepted by the admin API, the model repository API and the
	// feature server's writes. Roles: read or operate.
	Tokens []Token `yaml:"tokens"`
	// AuditLog is where one JSON line per state-changing call goes:
	// "stderr" (default, beside the logs), "stdout", "off" or a file path
	// (appended to).
	AuditLog string `yaml:"audit_log"`
	// MemoryBudgetBytes is the process-wide budget of request bytes held in
	// memory at once, shared by every listener; a request that would pass
	// it is answered 503 overloaded [256 MiB].
	MemoryBudgetBytes int64 `yaml:"memory_budget_bytes"`
}

// Token is one operator credential: id, SHA-256 of the secret, role.
type Token = authzspec.Token

// TLS is one listener's TLS (and optional mTLS) configuration.
type TLS = tlsspec.ServerOptions

// ClientTLS is TLS for an outbound connection.
type ClientTLS = tlsspec.ClientOptions

// Limits bound one listener's requests: body bytes, header bytes and count.
type Limits = limitspec.Limits

// hashTokens replaces each token's plain secret (which must come from
// ${ENV}) with its SHA-256, like hashAPIKeys does for API keys.
func (c *Config) hashTokens() []error {
	if c.Security == nil {
		return nil
	}
	var problems []error
	for i := range c.Security.Tokens {
		t := &c.Security.Tokens[i]
		if err := c.hashSecret(fmt.Sprintf("security.tokens[%d].token", i), "token", "token", &t.Token, &t.SHA256); err != nil {
			problems = append(problems, err)
		}
	}
	return problems
}

// security checks the security section and the rule that every write API
// reachable beyond loopback needs a credential, then each listener's TLS
// and limits.
func (v *validator) security(c *Config) {
	l := listenerChecks{v: v, operate: v.tokens(c.Security)}
	if c.Security != nil {
		l.budget = c.Security.MemoryBudgetBytes
	}
	if m := c.ModelServer; m != nil {
		l.modelServer(m)
	}
	if f := c.FeatureServer; f != nil {
		l.featureServer(f)
	}
	if g := c.Gateway; g != nil {
		l.gateway(g)
	}
	if cl := c.Cluster; cl != nil {
		l.clientTLS("cluster.nats.tls", cl.NATS.TLS)
	}
}

// tokens checks the operator tokens and the memory budget, and reports
// whether a valid token may operate.
func (v *validator) tokens(s *Security) (operate bool) {
	if s == nil {
		return false
	}
	var valid []Token
	for i, t := range s.Tokens {
		p := fmt.Sprintf("security.tokens[%d]", i)
		if t.SHA256 == "" && v.written(p+".token") {
			continue // Load already said why
		}
		ok := true
		if t.ID == "" {
			v.add(p+".id", "is required")
			ok = false
		}
		if b, err := hex.DecodeString(t.SHA256); err != nil || len(b) != sha256.Size {
			v.add(p+".token_sha256", "want 64 hex digits (SHA-256), or token: ${ENV_VAR}")
			ok = false
		}
		if _, err := authzspec.ParseRole(t.Role); err != nil {
			v.add(p+".role", "%q is not one of read, operate", t.Role)
			ok = false
		}
		if ok {
			valid = append(valid, t)
			operate = operate || t.Role == "operate"
		}
	}
	// Duplicate ids and shared secrets, as the policy would refuse them.
	if _, err := authzspec.ParseTokens(valid); err != nil {
		v.add("security.tokens", "%s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if s.MemoryBudgetBytes < 0 {
		v.add("security.memory_budget_bytes", "must not be negative")
	}
	return operate
}

// listenerChecks checks what every listener shares: exposure without a
// credential, TLS, and limits against the memory budget.
type listenerChecks struct {
	v       *validator
	operate bool  // an operate token is configured
	budget  int64 // security.memory_budget_bytes
}

// beyond refuses a state-changing API reachable beyond loopback without
// an operate token.
func (l listenerChecks) beyond(path, addr string) {
	if l.operate || IsLoopback(addr) {
		return
	}
	l.v.add(path, "%q is reachable beyond loopback, but no operate token is configured: its state-changing API would be open to the network; add a token with role operate under security.tokens, or bind 127.0.0.1", addr)
}

func (l listenerChecks) limits(path string, lim Limits) {
	if err := lim.Validate(l.budget); err != nil {
		for _, e := range flattenJoined(err) {
			l.v.add(path, "%v", e)
		}
	}
}

func (l listenerChecks) tls(path string, t *TLS) {
	if t == nil {
		return
	}
	if err := t.Validate(); err != nil {
		l.v.add(path, "%v", err)
	}
}

func (l listenerChecks) clientTLS(path string, t *ClientTLS) {
	if t == nil {
		return
	}
	if err := t.Validate(); err != nil {
		l.v.add(path, "%v", err)
	}
}

// modelServer checks the model server's listeners. A restriction stands in
// for a token only when it covers the repository API on both protocols:
// one left open is still open.
func (l listenerChecks) modelServer(m *ModelServer) {
	httpRestricted := l.restricted("model_server.http_restricted_api", m.HTTPRestrictedAPI)
	grpcRestricted := l.restricted("model_server.grpc_restricted_protocol", m.GRPCRestrictedProtocol)
	if !httpRestricted || !grpcRestricted {
		l.beyond("model_server.address", m.Address)
	}
	l.tls("model_server.tls", m.TLS)
	l.limits("model_server.limits", m.Limits)
}

// restricted checks Triton restricted-API rules and reports whether one
// covers the model repository API.
func (l listenerChecks) restricted(path string, rules []string) bool {
	covered := false
	for i, r := range rules {
		rs, err := authzspec.ParseRestriction(r)
		if err != nil {
			l.v.add(fmt.Sprintf("%s[%d]", path, i), "%v", err)
		}
		covered = covered || slices.Contains(rs.Groups, authzspec.GroupModelRepository)
	}
	return covered
}

func (l listenerChecks) featureServer(f *FeatureServer) {
	l.beyond("feature_server.address", f.Address)
	l.v.oneOf("feature_server.read_auth", f.ReadAuth, "open", "token")
	l.tls("feature_server.tls", f.TLS)
	l.limits("feature_server.limits", f.Limits)
	if f.MaxEntityRows < 0 {
		l.v.add("feature_server.max_entity_rows", "must not be negative")
	}
}

// gateway checks the gateway's listeners, its outbound TLS, and that
// clients named by certificate identity are verified.
func (l listenerChecks) gateway(g *Gateway) {
	if _, _, err := net.SplitHostPort(g.Admin); err == nil { // else already reported
		l.beyond("gateway.admin", g.Admin)
	}
	l.tls("gateway.tls", g.TLS)
	l.tls("gateway.admin_tls", g.AdminTLS)
	l.limits("gateway.limits", g.Limits)
	for i, b := range g.Backends {
		p := fmt.Sprintf("gateway.backends[%d].tls", i)
		if b.TLS != nil && b.Kind == "in_process" {
			l.v.add(p, "an in_process backend makes no connection; tls is for kserve_grpc and kserve_http backends")
			continue
		}
		l.clientTLS(p, b.TLS)
	}
	if px := g.Proxy; px != nil {
		l.proxyAPIs(g, px)
	}
	l.clientTLS("gateway.rate_limit_backend.redis.tls", g.RateLimitBackend.Redis.TLS)
	l.clientTLS("gateway.recording.nats.tls", g.Recording.NATS.TLS)
	ids := map[string]string{}
	for i, cl := range g.Clients {
		if cl.TLSIdentity == "" {
			continue
		}
		if prev, dup := ids[cl.TLSIdentity]; dup {
			l.v.add(fmt.Sprintf("gateway.clients[%d].tls_identity", i), "%q is already the identity of client %q", cl.TLSIdentity, prev)
		}
		ids[cl.TLSIdentity] = cl.ID
	}
	if len(ids) > 0 && (g.TLS == nil || g.TLS.ClientCAFile == "") {
		l.v.add("gateway.tls.client_ca_file", "clients name a tls_identity, so client certificates must be verified: set gateway.tls.client_ca_file")
	}
}

// IsLoopback reports whether a listen address ("host:port" or a bare host)
// binds only the loopback interface: 127.0.0.0/8, ::1 or "localhost". An
// empty host, 0.0.0.0 and :: bind every interface.
func IsLoopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// proxyAPIs checks the KServe proxy's allow_apis: known groups, and no
// state-changing or shared-memory group open to a caller the model server
// cannot hold to an operate token.
func (l listenerChecks) proxyAPIs(g *Gateway, px *Proxy) {
	for i, api := range px.AllowAPIs {
		p := fmt.Sprintf("gateway.proxy.allow_apis[%d]", i)
		switch {
		case slices.Contains(ProxyDefaultAPIs, api):
			// always forwarded; harmless
		case !slices.Contains(ProxyStateAPIs, api):
			l.v.add(p, "unknown API group %q (forwarded when listed: %s; always: %s)", api,
				strings.Join(ProxyStateAPIs, ", "), strings.Join(ProxyDefaultAPIs, ", "))
		case g.Anonymous.Allowed:
			l.v.add(p, "the %s API would be open to anonymous callers of the gateway: turn off gateway.anonymous.allowed or drop it from allow_apis", api)
		case !l.operate:
			l.v.add(p, "the %s API changes the model server's state or reaches its shared memory: a proxied call needs an operate token (X-Sluice-Token), and security.tokens has none; add one or drop it from allow_apis", api)
		}
	}
}
