package tlsconfig

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/telemetry"
)

// Metrics holds the collectors of every TLS listener of a process; build
// one with [NewMetrics] and hand it to each [NewServer]. The listener
// label is the listener's name, bounded by the configuration.
type Metrics struct {
	reloads *prometheus.CounterVec
	expiry  *prometheus.GaugeVec
}

// NewMetrics builds the collectors and registers them with reg; a nil reg
// leaves them unregistered. A second call on the same registry reuses the
// collectors already there.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return &Metrics{
		reloads: telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_tls_reloads_total",
			Help: "Reloads of a listener's TLS certificate, key and client CA files after they changed on disk, by result (success, error); after an error the listener keeps serving the previous files.",
		}, []string{"listener", "result"})),
		expiry: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_tls_certificate_expiry_timestamp_seconds",
			Help: "NotAfter of the leaf certificate a listener serves, as a Unix timestamp.",
		}, []string{"listener"})),
	}
}
