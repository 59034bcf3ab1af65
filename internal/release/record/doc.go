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
// created with subjects <prefix>.> when missing), asynchronously; failed or
// unacknowledged publishes are retried with a stable Nats-Msg-Id, and
// Close waits, bounded by its context, for every ack and reports the
// records it could not confirm.
//
// # Writer
//
// Writer puts a bounded queue in front of a Sink. Offer never blocks: a
// full queue drops the record and counts it. A goroutine writes the queue
// to the sink in batches; Close stops accepting, writes everything
// accepted, and closes the sink. Metrics: sluice_release_records_total
// {sink,result=written|dropped|failed} and
// sluice_release_record_queue_length{sink}.
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
