// Package aggregate is the tile arithmetic of stream feature views, the
// one implementation that both the online aggregator and historical
// retrieval run, so a training row at time t holds exactly what serving
// answered at t.
//
// Events fall into fixed-size time tiles by event time. A tile keeps, per
// aggregated column, the count, the exact sum and sum of squares (as
// non-overlapping float64 partials, so the rounded result does not
// depend on the order events were added in), min, max and the last value
// (greatest event time, then greatest sequence number), plus the stream
// sequence numbers it has applied: a redelivered event is recognised and
// not counted twice. A window value at time t combines the tiles from
// tile(t)−window/tile+1 to tile(t).
//
// An event is late when its event time is older than its arrival (the
// time the stream stored it) minus the allowed lateness; late events are
// dropped and counted. Arrival times are part of the stream, so a replay,
// a second aggregator process and historical retrieval all judge an
// event the same way.
package aggregate
