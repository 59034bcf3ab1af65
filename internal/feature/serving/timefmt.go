package serving

import "time"

// The layouts of AppendTimestamp: whole seconds, and 3, 6 or 9 fraction
// digits.
const (
	layoutSeconds = "2006-01-02T15:04:05Z"
	layoutMillis  = "2006-01-02T15:04:05.000Z"
	layoutMicros  = "2006-01-02T15:04:05.000000Z"
	layoutNanos   = "2006-01-02T15:04:05.000000000Z"
)

// AppendTimestamp appends t in UTC as RFC 3339 the way protobuf's JSON
// mapping writes a google.protobuf.Timestamp, which is what Feast's
// feature server sends (MessageToDict of its response): "Z" for the zone
// and 0, 3, 6 or 9 fraction digits, the fewest that hold the value
// exactly. Go's RFC3339Nano trims trailing zeros instead ("…:41.34Z"),
// which Python's datetime.fromisoformat refuses before 3.11, and Feast's
// remote online store parses event timestamps with it.
func AppendTimestamp(b []byte, t time.Time) []byte {
	t = t.UTC()
	layout := layoutNanos
	switch ns := t.Nanosecond(); {
	case ns == 0:
		layout = layoutSeconds
	case ns%1_000_000 == 0:
		layout = layoutMillis
	case ns%1_000 == 0:
		layout = layoutMicros
	}
	return t.AppendFormat(b, layout)
}
