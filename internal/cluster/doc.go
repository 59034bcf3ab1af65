// Package cluster is a fleet's shared state: a connection to NATS
// JetStream and the key-value buckets the replicas of one fleet share.
// It holds no consensus code of its own: compare-and-set on a
// key's revision (JetStream's expected last sequence) is the only
// agreement primitive, and JetStream's own replication is the durability.
//
// # Life
//
// New builds a Cluster and starts nothing. Connect dials the server
// (bounded by ConnectTimeout; the NATS client then reconnects for ever
// and runs its own reader goroutines). Bucket creates or opens a bucket
// and reads its current entries into a local cache. Run starts, for each
// bucket, a watcher that keeps the cache current and calls the bucket's
// change handlers, and the publish loop that calls every registered
// publisher each PublishInterval; it restarts the watchers after every
// reconnect and returns when its context ends. Close closes the
// connection.
//
// # NATS down
//
// While the server cannot be reached the cache keeps the last entries
// seen, writes fail at once with the client's error, and Status, the
// sluice_cluster_connected gauge and a warning in the log say so; readers
// keep working from the cache. When the server is back the watchers are
// restarted, so every change made meanwhile arrives.
//
// # Keys
//
// Key returns a key token for any string: letters, digits, '-' and '_'
// are kept, every other byte is written as '=' and two hex digits (KV keys
// allow [-/_=.a-zA-Z0-9]); dots separate tokens.
//
// # Metrics
//
// sluice_cluster_connected (1 while the connection is up),
// sluice_cluster_last_sync_age_seconds (since the server last answered a
// write, a watch or a ping), sluice_cluster_cas_conflicts_total{bucket}
// (compare-and-set writes another replica won) and
// sluice_cluster_publish_errors_total{bucket}.
package cluster
