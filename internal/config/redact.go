package config

import (
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// redactedValue replaces secrets in Redacted and String.
const redactedValue = "[redacted]"

// Redacted returns a copy of c with every secret (API keys and their
// hashes, the Redis password) replaced by "[redacted]", for config dumps.
// The copy shares the non-secret parts of c: treat both as read-only.
func (c *Config) Redacted() *Config {
	if c == nil {
		return nil
	}
	out := *c
	out.src = nil
	if c.Security != nil {
		sec := *c.Security
		sec.Tokens = slices.Clone(sec.Tokens)
		for i := range sec.Tokens {
			sec.Tokens[i].Token = ""
			if sec.Tokens[i].SHA256 != "" {
				sec.Tokens[i].SHA256 = redactedValue
			}
		}
		out.Security = &sec
	}
	if c.ModelServer != nil {
		m := *c.ModelServer
		m.HTTPRestrictedAPI = redactRestrictions(m.HTTPRestrictedAPI)
		m.GRPCRestrictedProtocol = redactRestrictions(m.GRPCRestrictedProtocol)
		out.ModelServer = &m
	}
	if c.Gateway != nil {
		g := *c.Gateway
		g.Clients = slices.Clone(g.Clients)
		for i := range g.Clients {
			if g.Clients[i].APIKey != "" {
				g.Clients[i].APIKey = redactedValue
			}
			if g.Clients[i].APIKeySHA256 != "" {
				g.Clients[i].APIKeySHA256 = redactedValue
			}
		}
		if g.RateLimitBackend.Redis.Password != "" {
			g.RateLimitBackend.Redis.Password = redactedValue
		}
		out.Gateway = &g
	}
	return &out
}

// redactRestrictions hides the header values of Triton restricted-API
// rules ("<API>:<key>=<value>"): the value is a shared secret.
func redactRestrictions(rs []string) []string {
	if rs == nil {
		return nil
	}
	out := make([]string, len(rs))
	for i, r := range rs {
		if k, _, ok := strings.Cut(r, "="); ok {
			out[i] = k + "=" + redactedValue
		} else {
			out[i] = r
		}
	}
	return out
}

// String returns the redacted config as YAML.
func (c *Config) String() string {
	b, err := yaml.Marshal(c.Redacted())
	if err != nil {
		return "config: " + err.Error()
	}
	return string(b)
}
