// Package authzspec is how sluice.yaml and the command line write access
// control: operator tokens and their roles, and Triton's restricted-API
// rules, with the checks that need nothing but the values. Package authz
// enforces them on every listener; package config embeds them. It imports
// only the standard library, so that config stays data.
package authzspec

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Role is what a credential may do. Roles are ordered: RoleOperate implies
// RoleRead, and every role satisfies RoleNone.
type Role int

// Roles, weakest first.
const (
	// RoleNone needs no credential at all: health probes.
	RoleNone Role = iota
	// RoleRead may read: dumps, status, endpoints, metrics, and the
	// read side of the KServe API (metadata, inference, statistics).
	RoleRead
	// RoleOperate may change state: reload, rollout commands, drain,
	// pprof, repository load/unload, push, materialize.
	RoleOperate
)

// String returns "none", "read" or "operate".
func (r Role) String() string {
	switch r {
	case RoleNone:
		return "none"
	case RoleRead:
		return "read"
	case RoleOperate:
		return "operate"
	default:
		return fmt.Sprintf("role(%d)", int(r))
	}
}

// ParseRole parses a configured role: "read" or "operate". RoleNone is not
// a role a credential can be given, so "none" is refused too.
func ParseRole(s string) (Role, error) {
	switch s {
	case "read":
		return RoleRead, nil
	case "operate":
		return RoleOperate, nil
	default:
		return RoleNone, fmt.Errorf("role %q: want read or operate", s)
	}
}

// Token is one configured credential. The config package embeds it.
type Token struct {
	// ID names the credential's holder in logs and audit lines.
	ID string `yaml:"id"`
	// SHA256 is the hex SHA-256 of the secret (see HashToken).
	SHA256 string `yaml:"token_sha256"`
	// Token is the plain secret. The config loader accepts it only from
	// ${ENV} expansion, hashes it into SHA256 and clears it; NewPolicy
	// refuses a Token whose plain secret is still set.
	Token string `yaml:"token,omitempty"`
	// Role is "read" or "operate".
	Role string `yaml:"role"`
}

// HashToken returns the hex SHA-256 of a secret, the form token_sha256 takes.
func HashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// TokenHash is a checked Token: its secret's SHA-256 as bytes.
type TokenHash struct {
	ID   string
	Hash [sha256.Size]byte
	Role Role
}

// ParseTokens checks tokens and returns those whose hash is valid, and
// every problem at once: an empty or duplicate id, a plain token left set,
// a bad role, a token_sha256 that is not 64 hex digits, and two tokens
// with one secret.
func ParseTokens(tokens []Token) ([]TokenHash, error) {
	var errs []error
	out := make([]TokenHash, 0, len(tokens))
	ids := make(map[string]bool, len(tokens))
	byHash := make(map[[sha256.Size]byte]string, len(tokens))
	for i, t := range tokens {
		name := fmt.Sprintf("token %q", t.ID)
		switch {
		case t.ID == "":
			name = fmt.Sprintf("tokens[%d]", i)
			errs = append(errs, fmt.Errorf("%s: empty id", name))
		case ids[t.ID]:
			errs = append(errs, fmt.Errorf("%s: duplicate id", name))
		}
		ids[t.ID] = true
		if t.Token != "" {
			errs = append(errs, fmt.Errorf("%s: a plain token must not reach the policy; the config loader hashes it into token_sha256", name))
		}
		role, err := ParseRole(t.Role)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		raw, err := hex.DecodeString(strings.TrimSpace(t.SHA256))
		if err != nil || len(raw) != sha256.Size {
			errs = append(errs, fmt.Errorf("%s: token_sha256 must be %d hex digits", name, 2*sha256.Size))
			continue
		}
		th := TokenHash{ID: t.ID, Role: role}
		copy(th.Hash[:], raw)
		if other, dup := byHash[th.Hash]; dup {
			errs = append(errs, fmt.Errorf("tokens %q and %q: same secret", other, t.ID))
			continue
		}
		byHash[th.Hash] = t.ID
		out = append(out, th)
	}
	return out, errors.Join(errs...)
}
