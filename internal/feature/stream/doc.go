// Package stream is the online side of stream feature views: an
// aggregator that consumes a stream source's events and keeps each
// entity's time tiles (package aggregate) in the online store, where
// serving combines them at read time.
//
// Events come through Source, a small interface: JetStream implements it
// with a durable pull consumer that every aggregator process of the
// source binds to, so several processes share the events (NATS spreads
// them) and a crashed one's unacknowledged events go to the others or to
// its restart. A Kafka reader would implement it with a consumer group,
// mapping partition and offset into Message.Seq.
//
// Events are acknowledged only after their tiles are written. A tile
// remembers the sequence numbers it has applied, and every write is a
// compare-and-set on the state's version (a write that finds another
// version is retried on the new state), so a redelivery is never counted
// twice and concurrent processes never lose each other's updates.
package stream
