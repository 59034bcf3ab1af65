package record

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/telemetry"
)

// writerMetrics are one Writer's collectors, resolved to its sink label up
// front so that Offer does no label lookups.
type writerMetrics struct {
	written, dropped, failed prometheus.Counter
	queueLen                 prometheus.Gauge
}

func newWriterMetrics(reg prometheus.Registerer, sink string) *writerMetrics {
	records := telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sluice", Subsystem: "release", Name: "records_total",
		Help: "Recorded exchanges by sink and result: written (stored by the sink), dropped (queue full or writer closed) or failed (the sink refused them, or shutdown gave up on them).",
	}, []string{"sink", "result"}))
	queue := telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "sluice", Subsystem: "release", Name: "record_queue_length",
		Help: "Records accepted by a recording writer and not yet handed to its sink.",
	}, []string{"sink"}))
	return &writerMetrics{
		written:  records.WithLabelValues(sink, "written"),
		dropped:  records.WithLabelValues(sink, "dropped"),
		failed:   records.WithLabelValues(sink, "failed"),
		queueLen: queue.WithLabelValues(sink),
	}
}

// natsMetrics count a NATS sink's publish acknowledgements.
type natsMetrics struct {
	acked, retried, lost prometheus.Counter
}

func newNATSMetrics(reg prometheus.Registerer, stream string) *natsMetrics {
	acks := telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sluice", Subsystem: "release", Name: "nats_publishes_total",
		Help: "Recording publishes to NATS JetStream by stream and result: acked (stored), retried (ack failed or timed out; published again) or lost (retries used up).",
	}, []string{"stream", "result"}))
	return &natsMetrics{
		acked:   acks.WithLabelValues(stream, "acked"),
		retried: acks.WithLabelValues(stream, "retried"),
		lost:    acks.WithLabelValues(stream, "lost"),
	}
}
