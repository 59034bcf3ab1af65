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
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return appendTimestampLayout(b, t)
	}
	hour, minute, sec := t.Clock()
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	switch ns := t.Nanosecond(); {
	case ns == 0:
	case ns%1_000_000 == 0:
		b = append(b, '.')
		b = appendDigits(b, ns/1_000_000, 3)
	case ns%1_000 == 0:
		b = append(b, '.')
		b = appendDigits(b, ns/1_000, 6)
	default:
		b = append(b, '.')
		b = appendDigits(b, ns, 9)
	}
	return append(b, 'Z')
}

// appendTimestampLayout is AppendTimestamp through time's layouts, for
// the years that do not have four digits.
func appendTimestampLayout(b []byte, t time.Time) []byte {
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

// appendDigits appends x, which is not negative and has at most width
// digits, zero-padded to width.
func appendDigits(b []byte, x, width int) []byte {
	var buf [9]byte
	for i := width - 1; i >= 0; i-- {
		buf[i] = byte('0' + x%10)
		x /= 10
	}
	return append(b, buf[:width]...)
}
