package admission

import "github.com/sluice-ml/sluice/internal/admission/limitspec"

// Limits are one listener's request limits; the type, its defaults and its
// checks live in the leaf package limitspec, which config embeds.
type Limits = limitspec.Limits

// Defaults of the budget and of a listener's limits (see limitspec and the
// package documentation for why these values).
const (
	DefaultBudgetBytes          = limitspec.DefaultBudgetBytes
	SmallBytes                  = limitspec.SmallBytes
	DefaultMaxHeaderBytes       = limitspec.DefaultMaxHeaderBytes
	DefaultMaxHeaderCount       = limitspec.DefaultMaxHeaderCount
	DefaultMaxConcurrentStreams = limitspec.DefaultMaxConcurrentStreams
)

// DefaultLimits returns the default limits of a listener whose largest
// request body is maxBody bytes.
func DefaultLimits(maxBody int64) Limits { return limitspec.DefaultLimits(maxBody) }
