package config

import (
	"slices"

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

// String returns the redacted config as YAML.
func (c *Config) String() string {
	b, err := yaml.Marshal(c.Redacted())
	if err != nil {
		return "config: " + err.Error()
	}
	return string(b)
}
