// Package releasetest has what the release hooks' unit tests share: a
// release.Service of their own.
package releasetest

import (
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway/release"
)

// Service is a release.Service made of its fields.
type Service struct {
	Cfg      config.Service
	Feats    []release.Feature
	Outs     []string
	Hooks    map[string]release.Hook      // by kind
	Backends map[string]release.ModelCall // by backend name
}

// Name is Cfg.Name.
func (s Service) Name() string { return s.Cfg.Name }

// Config is Cfg.
func (s Service) Config() config.Service { return s.Cfg }

// Features are Feats.
func (s Service) Features() []release.Feature { return s.Feats }

// Outputs are Outs.
func (s Service) Outputs() []string { return s.Outs }

// Hook is Hooks[kind].
func (s Service) Hook(kind string) release.Hook { return s.Hooks[kind] }

// ModelCall is Backends[backend].
func (s Service) ModelCall(backend string) release.ModelCall { return s.Backends[backend] }
