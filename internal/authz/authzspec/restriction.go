package authzspec

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The KServe API groups of Triton's restricted-API flags
// (--http-restricted-api and --grpc-restricted-protocol), spelled as
// Triton spells them.
const (
	GroupHealth          = "health"
	GroupMetadata        = "metadata"
	GroupInference       = "inference"
	GroupSharedMemory    = "shared-memory"
	GroupModelConfig     = "model-config"
	GroupModelRepository = "model-repository"
	GroupStatistics      = "statistics"
	GroupTrace           = "trace"
	GroupLogging         = "logging"
)

// knownGroups lists every group, in Triton's documentation order.
var knownGroups = []string{
	GroupHealth, GroupMetadata, GroupInference, GroupSharedMemory, GroupModelConfig,
	GroupModelRepository, GroupStatistics, GroupTrace, GroupLogging,
}

// KnownGroups returns every group, in Triton's documentation order.
func KnownGroups() []string { return slices.Clone(knownGroups) }

// GRPCRestrictionPrefix is what Triton prepends to a restriction's key to
// name the gRPC metadata entry it checks: a rule "...:admin-key=v" on the
// gRPC listener wants metadata "triton-grpc-protocol-admin-key: v".
const GRPCRestrictionPrefix = "triton-grpc-protocol-"

// Restriction is one Triton restricted-API rule: a request to any of
// Groups must carry header (HTTP) or metadata (gRPC, with
// GRPCRestrictionPrefix) Key with exactly Value, else it is refused.
type Restriction struct {
	Groups []string
	Key    string
	Value  string
}

// ParseRestriction parses Triton's flag value "<API>[,<API>...]:<key>=<value>",
// as tritonserver does: the groups end at the first ':', the key at the
// first '=' after it, and the value is the rest (it may hold ':' and '=').
// Every group must be known and appear once; the key must be a valid header
// name; the value must not be empty.
func ParseRestriction(flag string) (Restriction, error) {
	groups, setting, ok := strings.Cut(flag, ":")
	if !ok {
		return Restriction{}, fmt.Errorf("restriction %q: want <API>[,<API>...]:<key>=<value>, missing ':'", flag)
	}
	key, value, ok := strings.Cut(setting, "=")
	if !ok {
		return Restriction{}, fmt.Errorf("restriction %q: want <API>[,<API>...]:<key>=<value>, missing '=' after ':'", flag)
	}
	if groups == "" {
		return Restriction{}, fmt.Errorf("restriction %q: no API group before ':'", flag)
	}
	r := Restriction{Groups: strings.Split(groups, ","), Key: key, Value: value}
	if err := r.Validate(); err != nil {
		return Restriction{}, fmt.Errorf("restriction %q: %w", flag, err)
	}
	return r, nil
}

// String formats r as the flag value ParseRestriction reads, with the
// value hidden: it is a shared secret.
func (r Restriction) String() string {
	return strings.Join(r.Groups, ",") + ":" + r.Key + "=<redacted>"
}

// Validate checks one rule on its own; authz.NewPolicy checks that no
// group is in two rules.
func (r Restriction) Validate() error {
	var errs []error
	if len(r.Groups) == 0 {
		errs = append(errs, errors.New("no API group"))
	}
	for i, g := range r.Groups {
		switch {
		case !slices.Contains(knownGroups, g):
			errs = append(errs, fmt.Errorf("unknown API group %q (known: %s)", g, strings.Join(knownGroups, ", ")))
		case slices.Contains(r.Groups[:i], g):
			errs = append(errs, fmt.Errorf("API group %q listed twice", g))
		}
	}
	switch {
	case r.Key == "":
		errs = append(errs, errors.New("empty key"))
	case !validHeaderName(r.Key):
		errs = append(errs, fmt.Errorf("key %q is not a valid header name", r.Key))
	case isCredentialHeader(r.Key):
		errs = append(errs, fmt.Errorf("key %q is a credential header; pick another name", r.Key))
	}
	switch {
	case r.Value == "":
		errs = append(errs, errors.New("empty value"))
	case strings.TrimLeft(r.Value, " \t") != r.Value || strings.TrimRight(r.Value, " \t") != r.Value:
		// HTTP servers strip a header value's surrounding blanks, so such a
		// value could never match.
		errs = append(errs, errors.New("value starts or ends with a blank"))
	case HasControl(r.Value):
		errs = append(errs, errors.New("value holds a control character"))
	}
	return errors.Join(errs...)
}

// validHeaderName reports whether s is an RFC 9110 token: the characters a
// header field name may hold.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// The credential headers (HTTP; gRPC metadata keys are their lower-case
// forms). A restriction may not use them as its key.
const (
	HeaderAuthorization = "Authorization"
	HeaderToken         = "X-Sluice-Token" //nolint:gosec // G101: a header name, not a credential
)

func isCredentialHeader(name string) bool {
	return strings.EqualFold(name, HeaderAuthorization) || strings.EqualFold(name, HeaderToken)
}

// HasControl reports whether s holds an ASCII control character.
func HasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}
