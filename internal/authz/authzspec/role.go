package authz

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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
