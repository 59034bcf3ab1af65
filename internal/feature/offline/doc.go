// Package offline reads a feature repository's offline data: Parquet file
// sources, scanned as a stream of rows (ScanView, used by materialization),
// and point-in-time correct historical retrieval (Historical), which joins
// entity rows to the feature rows that were current at each row's event
// timestamp, in bounded memory by spilling partitions to temporary files.
package offline
