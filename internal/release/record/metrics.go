package record

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/telemetry"
)

// writerMetrics are one Writer's collectors, resolved to its sink label up
// front so that Offer does no label lookups.
type writerMetrics struct {
	written, dropped, failed, droppedByPolicy, damaged prometheus.Counter
	spoolWriteErrors                                   *prometheus.CounterVec
	queueLen                                           prometheus.Gauge
	spooled, spoolCorrupt                              prometheus.Counter
	spoolRecords, spoolBytes                           prometheus.Gauge
}

func newWriterMetrics(reg prometheus.Registerer, sink string) *writerMetrics {
	records := telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sluice", Subsystem: "release", Name: "records_total",
		Help: "Recorded exchanges by sink and result: written (stored by the sink), dropped (queue full or writer closed: never accepted), failed (accepted and lost: not encodable, refused by a sink without a spool, or given up at shutdown without one, or unwritable to the spool), dropped_by_policy (accepted and discarded because the spool was full) or damaged (spooled, then lost to damage on disk; the intact records around them are kept).",
	}, []string{"sink", "result"}))
	queue := telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "sluice", Subsystem: "release", Name: "record_queue_length",
		Help: "Records accepted by a recording writer and not yet handed to its sink.",
	}, []string{"sink"}))
	spooled := telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sluice", Subsystem: "release", Name: "record_spooled_total",
		Help: "Records a recording writer put in its disk spool because the sink did not store them (or the spool already held records).",
	}, []string{"sink"}))
	corrupt := telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sluice", Subsystem: "release", Name: "record_spool_corrupt_bytes_total",
		Help: "Bytes of corrupt or torn spool data cut off when a recording spool was opened.",
	}, []string{"sink"}))
	spoolRecords := telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "sluice", Subsystem: "release", Name: "record_spool_records",
		Help: "Records in a recording writer's disk spool, waiting for the sink.",
	}, []string{"sink"}))
	spoolBytes := telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "sluice", Subsystem: "release", Name: "record_spool_bytes",
		Help: "Size of a recording writer's disk spool files (bounded by its max bytes).",
	}, []string{"sink"}))
	writeErrs := telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sluice", Subsystem: "release", Name: "record_spool_write_errors_total",
		Help: "Failed writes to a recording spool (appends, new segments, the cursor) by cause: the errno (enospc, edquot, eio, erofs, eacces, eperm, enoent, emfile, enfile, efbig) or other. The first of each cause is logged.",
	}, []string{"sink", "cause"}))
	return &writerMetrics{
		written:          records.WithLabelValues(sink, "written"),
		dropped:          records.WithLabelValues(sink, "dropped"),
		failed:           records.WithLabelValues(sink, "failed"),
		droppedByPolicy:  records.WithLabelValues(sink, "dropped_by_policy"),
		damaged:          records.WithLabelValues(sink, "damaged"),
		spoolWriteErrors: writeErrs.MustCurryWith(prometheus.Labels{"sink": sink}),
		queueLen:         queue.WithLabelValues(sink),
		spooled:          spooled.WithLabelValues(sink),
		spoolCorrupt:     corrupt.WithLabelValues(sink),
		spoolRecords:     spoolRecords.WithLabelValues(sink),
		spoolBytes:       spoolBytes.WithLabelValues(sink),
	}
}

// natsMetrics count a NATS sink's publishes by outcome.
type natsMetrics struct {
	acked, duplicates, failed prometheus.Counter
}

func newNATSMetrics(reg prometheus.Registerer, stream string) *natsMetrics {
	acks := telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sluice", Subsystem: "release", Name: "nats_publishes_total",
		Help: "Recording publishes to NATS JetStream by stream and result: acked (stored), duplicate (acked as already stored: a retry of a stored record) or failed (refused by the connection, or the ack failed or timed out; the record goes to, or stays in, the writer's spool).",
	}, []string{"stream", "result"}))
	return &natsMetrics{
		acked:      acks.WithLabelValues(stream, "acked"),
		duplicates: acks.WithLabelValues(stream, "duplicate"),
		failed:     acks.WithLabelValues(stream, "failed"),
	}
}
