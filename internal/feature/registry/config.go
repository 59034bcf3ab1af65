package registry

import (
	"fmt"
	"regexp"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-ml/sluice/internal/feature/online/connect"
)

// ConfigFile is the name of a feature repository's configuration file.
const ConfigFile = "feature_store.yaml"

// DefaultRegistry is where the registry snapshot goes when
// feature_store.yaml does not say.
const DefaultRegistry = "data/registry.json"

// DefaultOnlinePath is the embedded online store's file when
// feature_store.yaml does not say.
const DefaultOnlinePath = "data/online.db"

// Config is feature_store.yaml.
type Config struct {
	// Project names the repository's data in shared stores (letters,
	// digits and '_').
	Project string `yaml:"project"`
	// Registry is the registry snapshot's path, relative to the repository.
	Registry string `yaml:"registry"`
	// Provider is accepted for Feast compatibility; only "local" is valid.
	Provider string `yaml:"provider"`
	// Online is the online store (embedded by default).
	Online connect.Config `yaml:"online_store"`
	// Offline is the offline store; only type "file" (Parquet) exists.
	Offline struct {
		Type string `yaml:"type"`
	} `yaml:"offline_store"`
	// EntityKeySerializationVersion is accepted and ignored: Sluice keys
	// online rows per view with its own layout (feature.AppendEntityKey),
	// not with Feast's v3 entity-hash layout, so the version has no
	// meaning here. It is kept so Feast repositories load unchanged.
	EntityKeySerializationVersion int `yaml:"entity_key_serialization_version"`
	// FutureTimestampTolerance is how far in the future a pushed row's or
	// a source row's timestamp may be: beyond it a push is refused and
	// materialization skips (and counts) the row, so a row with a wrong
	// clock never reaches the online store. Omitted or 0 means
	// DefaultFutureTimestampTolerance.
	FutureTimestampTolerance time.Duration `yaml:"future_timestamp_tolerance"`
}

// DefaultFutureTimestampTolerance is future_timestamp_tolerance's default.
const DefaultFutureTimestampTolerance = 5 * time.Minute

var projectRE = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

// parseConfig decodes and validates feature_store.yaml, appending every
// problem to errs.
func parseConfig(data []byte, errs *[]Error) Config {
	var cfg Config
	pos := func(line int) Error { return Error{Pos: posAt(ConfigFile, line), Object: "feature_store.yaml"} }
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		*errs = append(*errs, yamlError(ConfigFile, "feature_store.yaml", err)...)
		return cfg
	}
	root := docRoot(&doc)
	if root == nil {
		e := pos(1)
		e.Msg = "file is empty (want at least project:)"
		*errs = append(*errs, e)
		return cfg
	}
	n := len(*errs)
	checkFields(ConfigFile, "feature_store.yaml", root, typeOf[Config](), errs)
	if len(*errs) > n {
		return cfg
	}
	if err := root.Decode(&cfg); err != nil {
		*errs = append(*errs, yamlError(ConfigFile, "feature_store.yaml", err)...)
		return cfg
	}
	bad := func(key, format string, args ...any) {
		e := pos(lineOf(root, key))
		e.Msg = fmt.Sprintf(format, args...)
		*errs = append(*errs, e)
	}
	switch {
	case cfg.Project == "":
		bad("project", "project is required")
	case !projectRE.MatchString(cfg.Project):
		bad("project", "project %q may contain only letters, digits and '_'", cfg.Project)
	}
	if cfg.Registry == "" {
		cfg.Registry = DefaultRegistry
	}
	if cfg.Provider != "" && cfg.Provider != "local" {
		bad("provider", "provider %q is not supported (want local)", cfg.Provider)
	}
	switch cfg.Online.Type {
	case "":
		cfg.Online.Type = "embedded"
		fallthrough
	case "embedded":
		if cfg.Online.Path == "" {
			cfg.Online.Path = DefaultOnlinePath
		}
	case "redis":
	default:
		bad("online_store", "online_store type %q is not supported (want embedded or redis)", cfg.Online.Type)
	}
	switch {
	case cfg.FutureTimestampTolerance < 0:
		bad("future_timestamp_tolerance", "future_timestamp_tolerance %s is negative", cfg.FutureTimestampTolerance)
	case cfg.FutureTimestampTolerance == 0:
		cfg.FutureTimestampTolerance = DefaultFutureTimestampTolerance
	}
	switch cfg.Offline.Type {
	case "":
		cfg.Offline.Type = "file"
	case "file":
	default:
		bad("offline_store", "offline_store type %q is not supported (want file)", cfg.Offline.Type)
	}
	return cfg
}
