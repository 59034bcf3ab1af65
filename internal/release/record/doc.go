// Package record defines the recording of shadowed (and replayed) requests:
// a versioned record schema, sinks that store records, a Writer that keeps
// storage off the request path, and readers that give records back in
// recorded order.
//
// # Schema
//
// A Record is one JSON object per JSONL line or NATS message:
//
//	{"schema":1,"request_id":"r-1","time":"2026-05-01T10:00:00.123456789Z",
//	 "service":"parcel-eta","shadow_key":"order-4711",
//	 "headers":{"x-region":"eu","x-request-id":"r-1","x-user-type":"premium"},
//	 "request":{"base_eta":35,"user_id":7},
//	 "features":{"route_features__distance_km":3.2,"user_stats__u_f00":0.12},
//	 "inputs":[{"name":"user_features","datatype":"FP32","shape":[1,2],"data":[0.12,3.2]}],
//	 "arms":{
//	  "primary":{"model":"parcel_eta","version":"1","status":200,"reason":"","latency_ms":1.9,
//	             "outputs":{"eta_prediction":[75.99]},"source":"model"},
//	  "shadow":{"model":"parcel_eta","version":"2","status":200,"reason":"","latency_ms":2.1,
//	            "outputs":{"eta_prediction":[66.13]}}}}
//
// Encode and Decode (and Record's json methods, which call them) validate
// records: schema, request_id, time, service and the primary arm are
// required. Decode rejects any schema version but SchemaVersion with a
// *VersionError naming it, and ignores unknown members. Non-finite feature
// values are written as null; non-finite output values as null, read back
// as NaN.
//
// # Sinks
//
// FileSink writes JSON lines to <base>-<UTC timestamp>-<seq>.jsonl files in
// one directory, rotated by size and age. Files are appended to under their
// final names (no temporary name and rename), so a recording that is still
// being written can be read, and a crash loses nothing already written;
// at worst the last line is torn. Names are taken with O_EXCL, so a
// restarted process starts new files and never touches old ones; files are
// fsynced on rotation and on Close.
//
// NATSSink publishes each record to <prefix>.<service> (default prefix
// sluice.recordings) of a JetStream stream (default SLUICE_RECORDINGS,
// created with subjects <prefix>.> when missing). A write publishes its
// batch asynchronously, then waits for the acks (bounded by the ack
// timeout and its context): a record is stored only once acknowledged.
// Every message carries a Nats-Msg-Id unique to the record and the same
// for every attempt at it, so the stream keeps one copy of a record
// published again within its duplicate window (10 minutes for a stream
// the sink creates). While the connection is down publishes fail at once,
// and a server that stops reading fails the connection within seconds.
//
// # Writer
//
// Writer puts a bounded queue in front of a Sink. Offer never blocks: a
// full queue drops the record and counts it (not accepted). A goroutine
// encodes the queue, gives each record its dedup id and writes it to the
// sink in batches.
//
// With a Spool (the gateway gives the NATS sink one), a record is
// accepted once Offer returns true and from then on is in the sink, in
// the spool, or counted as lost: records the sink did not store go to the
// spool, and while the spool holds records every new batch goes there
// too, so order is kept. A drainer goroutine writes the spool to the sink
// oldest first, with exponential back-off (100 ms doubling to RetryMax,
// jittered) while the sink fails, and removes records only once the sink
// stored them. Close tries, until its context or CloseTimeout ends, to
// store everything queued and spooled; then it writes the rest to the
// spool (local disk, fsynced) and returns. The next writer on the same
// spool directory drains it. A record whose publish reached the broker
// but whose ack did not (a killed or hung broker) is in doubt: it stays
// spooled and is published again with the same id, which the stream
// drops as a duplicate within its window; past the window it can be
// stored twice, and readers that must not count it twice skip repeated
// request ids (diff does).
//
// The spool (spool.go) is segment files of length- and CRC-32C-framed
// records, fsynced per batch, bounded in bytes; a torn or corrupt tail is
// cut off at open and counted. When it is full the policy applies:
// drop_newest (the default: the writer keeps taking records and discards
// what does not fit, counted as dropped_by_policy) or block (the writer
// waits for room, its queue fills and Offer drops; what is still queued
// when Close gives up is dropped by policy).
//
// The counts add up exactly at every quiescent point and after Close:
// accepted + recovered = written + spooled + dropped_by_policy + failed
// (WriterStats). Metrics: sluice_release_records_total
// {sink,result=written|dropped|failed|dropped_by_policy},
// sluice_release_record_queue_length{sink},
// sluice_release_record_spooled_total{sink},
// sluice_release_record_spool_records{sink},
// sluice_release_record_spool_bytes{sink},
// sluice_release_record_spool_corrupt_bytes_total{sink} and
// sluice_release_nats_publishes_total{stream,result=acked|duplicate|failed}.
//
// # Readers
//
// OpenFiles reads a JSONL file, a directory of rotated files (in name
// order, which is write order) or a glob; OpenStream reads a JetStream
// stream with an ordered consumer. Both implement Source, yield records in
// recorded order, filter on [From, To) of Record.Time and on the service,
// and report a malformed record by place (*LineError file:line,
// *MessageError stream sequence) unless told to skip and count it.
package record
