// Package release is the gateway's extension point for release
// mechanisms: a staged rollout, a drift watch, a shadow, an accuracy log,
// or one of your own. A mechanism is a Hook attached to one service, made
// by a Factory each time a configuration is applied; the gateway calls
// every hook of a service at the points of Hook, in order, and knows
// nothing else about them.
//
// State that must survive a configuration reload (a rollout's stage, a
// drift reference, windows of live traffic) is carried over by the
// factory: it receives the hook it made for the same service in the
// configuration being replaced, and returns it when the new settings
// leave it unchanged.
//
// The package imports no gateway code: the gateway implements Call and
// Service for its hooks, and the mechanisms live in packages of their own
// under this one (driftwatch, rollouthook, shadowhook, accuracylog), which
// never import the gateway either: what else they need of it comes
// through their factories' options.
package release

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/infer"
)

// Hook is a release mechanism attached to one service. The request-path
// points (Steer, FeaturesRead, ModelDone, Answered) run on the call's
// goroutine and must never block it: work that takes time goes to a
// bounded queue served by workers the mechanism's owner runs, and is
// dropped and counted when the queue is full.
type Hook interface {
	// Kind names the mechanism ("rollout", "drift", "shadow",
	// "accuracy"): the admin views and the other hooks find a service's
	// hook by it.
	Kind() string
	// Steer runs once the route table has picked the call's route, before
	// the backend and version it names are final: a hook may send the
	// call to another version (SetVersion) or backend (SetBackend).
	Steer(c Call)
	// FeaturesRead runs after a successful feature read.
	FeaturesRead(c Call)
	// ModelDone runs after the model call: err is its failure, else
	// c.Response() holds the response.
	ModelDone(c Call, err error)
	// Answered runs after the answer is built; ctx carries the call's
	// trace.
	Answered(ctx context.Context, c Call)
	// Tick runs about once a second while the gateway's background work
	// runs, on a goroutine of its own (a tick is never started while the
	// hook's previous one still runs); ctx ends when the gateway stops.
	Tick(ctx context.Context, now time.Time)
	// Status is the hook's admin view (nil: none).
	Status() any
	// Close releases what the hook holds. The gateway calls it when a
	// reload replaced the hook by another one made for the same service,
	// as soon as the replacement is made.
	Close()
}

// Base is a Hook that does nothing at any point; hooks embed it and
// override the points they use.
type Base struct{}

// Steer does nothing.
func (Base) Steer(Call) {}

// FeaturesRead does nothing.
func (Base) FeaturesRead(Call) {}

// ModelDone does nothing.
func (Base) ModelDone(Call, error) {}

// Answered does nothing.
func (Base) Answered(context.Context, Call) {}

// Tick does nothing.
func (Base) Tick(context.Context, time.Time) {}

// Status has nothing to show.
func (Base) Status() any { return nil }

// Close has nothing to release.
func (Base) Close() {}

// Factory makes a service's hook from a configuration being applied. prev
// is the hook this factory made for the same service in the configuration
// being replaced (nil at the first configuration, or when the service was
// not there or had no hook): returning it carries its state over. A nil
// Hook means the service does not use the mechanism. An error refuses
// the whole configuration: the running one keeps serving, and a hook the
// factory made is dropped without Close, so a factory must not disturb
// prev before it is sure to succeed.
type Factory func(s Service, prev Hook) (Hook, error)

// Service is the compiled service a factory makes a hook for.
type Service interface {
	// Name is the service's name.
	Name() string
	// Config is the service's settings.
	Config() config.Service
	// Features are the features the service reads, in column order.
	Features() []Feature
	// Outputs are the model outputs the service reads, by model name.
	Outputs() []string
	// Hook is the hook of kind the service got from an earlier factory
	// of the same configuration, or nil.
	Hook(kind string) Hook
	// ModelCall calls the configuration's backend name as the service
	// does, with one try (no retries), or is nil when there is no such
	// backend. It stays usable after the configuration is replaced.
	ModelCall(backend string) ModelCall
}

// ModelCall is a model call to one backend.
type ModelCall func(ctx context.Context, req *infer.Request) (*infer.Response, error)

// Feature is one feature a service reads.
type Feature struct {
	Ref    string // "view:feature"
	Column int    // index for Call.Feature
	Type   feature.Type
}

// Scalar reports whether the feature is a number (a bool reads 0 or 1, a
// timestamp seconds), the kind of value a drift window can watch.
func (f Feature) Scalar() bool {
	return !f.Type.List && f.Type.Kind != feature.KindString && f.Type.Kind != feature.KindBytes
}

// Value is a scalar feature value as a number: integers and timestamps
// as themselves, a true bool as 1.
func (f Feature) Value(v *feature.Value) float64 {
	switch {
	case f.Type.Kind == feature.KindInt32 || f.Type.Kind == feature.KindInt64 || f.Type.Kind == feature.KindUnixTimestamp:
		return float64(v.I64)
	case v.Bool:
		return 1
	}
	return v.F64
}

// Call is one call of a service as hooks see it. It is valid only during
// the hook point it is passed to, except where a method says otherwise.
type Call interface {
	// Service is the service's name.
	Service() string
	// RequestID is the call's request id.
	RequestID() string
	// Start is when the gateway took the call.
	Start() time.Time
	// Header is the request's header.
	Header() http.Header
	// Values are the request values by field name as routing reads them;
	// nil unless a route or hook routes by value.
	Values() map[string]string
	// ClientID is the authenticated client's id ("" anonymous).
	ClientID() string
	// Field is the text of the request field name, and whether the call
	// set it.
	Field(name string) (string, bool)

	// Version is the model version the call goes to.
	Version() string
	// SetVersion sends the call to another version (Steer only).
	SetVersion(v string)
	// SetBackend sends the call to another of the configuration's
	// backends (Steer only); an unknown name is ignored.
	SetBackend(name string)
	// Group is the traffic group and arm a steering hook put the call in
	// ("" when none did).
	Group() (group, arm string)
	// SetGroup records the call's traffic group and arm, for the hooks
	// after the steering one (Steer only).
	SetGroup(group, arm string)

	// Features is the feature read's response (nil before FeaturesRead,
	// or when the service reads none).
	Features() *serving.Response
	// Feature is the value of feature column col, nil when it is missing
	// or null.
	Feature(col int) *feature.Value
	// Response is the model's response (nil before ModelDone, or when the
	// call failed).
	Response() *infer.Response
	// Output is element 0 of the response's output name.
	Output(name string) (float64, bool)
	// Latency is how long the model call took (from ModelDone on).
	Latency() time.Duration

	// Answer is the answer built for the call (Answered only).
	Answer() *Answer
	// Request is the model request (from ModelDone on).
	Request() *infer.Request
	// RequestMap is the request body as parsed, by field name, as a
	// record keeps it.
	RequestMap() map[string]any
	// FeatureMap is the features read as a record keeps them,
	// "view__feature" → number, list or nil; nil when the call read none.
	FeatureMap() map[string]any
}

// Answer is one prediction, whichever protocol carries it: the gateway's
// answer, which the hooks see in Answered.
type Answer struct {
	RequestID string
	Service   string
	Route     string
	Model     string
	Version   string // the version that answered
	Source    string // "model", or "fallback_rule" when the rule answered
	// Reason says why the rule answered in place of a model that could
	// not be reached (the failure's reason code); empty otherwise.
	Reason  string
	Outputs []Output
}

// Output is one named output of an answer: a scalar, or an array.
type Output struct {
	Name   string
	Values []float64
	// Array is true unless the model returned exactly one element.
	Array bool
	// DataType is the model's datatype for the output (FP64 for a rule's
	// value): an FP32 value is written as the shortest text that reads
	// back as the same float32, integers as integers, BOOL as true/false.
	DataType infer.DataType
}

// KeepHeaders is the allow-listed headers of h that are set, by
// lower-case name: what a record or a logged prediction keeps.
func KeepHeaders(h http.Header, allow []string) map[string]string {
	out := make(map[string]string, len(allow))
	for _, name := range allow {
		if v := h.Get(name); v != "" {
			out[strings.ToLower(name)] = v
		}
	}
	return out
}
