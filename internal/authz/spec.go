package authz

import "github.com/sluice-ml/sluice/internal/authz/authzspec"

// The settings this package enforces are written in the leaf package
// authzspec, which config embeds; these names keep authz's own API whole.

// Role is what a credential may do (see authzspec.Role).
type Role = authzspec.Role

// Roles, weakest first.
const (
	RoleNone    = authzspec.RoleNone
	RoleRead    = authzspec.RoleRead
	RoleOperate = authzspec.RoleOperate
)

// Token is one configured credential (see authzspec.Token).
type Token = authzspec.Token

// Restriction is one Triton restricted-API rule (see
// authzspec.Restriction).
type Restriction = authzspec.Restriction

// The KServe API groups of Triton's restricted-API flags.
const (
	GroupHealth          = authzspec.GroupHealth
	GroupMetadata        = authzspec.GroupMetadata
	GroupInference       = authzspec.GroupInference
	GroupSharedMemory    = authzspec.GroupSharedMemory
	GroupModelConfig     = authzspec.GroupModelConfig
	GroupModelRepository = authzspec.GroupModelRepository
	GroupStatistics      = authzspec.GroupStatistics
	GroupTrace           = authzspec.GroupTrace
	GroupLogging         = authzspec.GroupLogging
)

// GRPCRestrictionPrefix is what Triton prepends to a restriction's key to
// name the gRPC metadata entry it checks.
const GRPCRestrictionPrefix = authzspec.GRPCRestrictionPrefix

// ParseRole parses a configured role: "read" or "operate".
func ParseRole(s string) (Role, error) { return authzspec.ParseRole(s) }

// HashToken returns the hex SHA-256 of a secret, the form token_sha256 takes.
func HashToken(secret string) string { return authzspec.HashToken(secret) }

// ParseRestriction parses Triton's flag value "<API>[,<API>...]:<key>=<value>".
func ParseRestriction(flag string) (Restriction, error) { return authzspec.ParseRestriction(flag) }

// KnownGroups returns every group, in Triton's documentation order.
func KnownGroups() []string { return authzspec.KnownGroups() }
