// Package jsonnum converts JSON number literals to float32 exactly as
// strconv.ParseFloat(s, 32) does, in about a third of its time for the
// long literals Python clients send (numpy's tolist gives 17-digit reprs).
//
// The KServe v2 JSON decoders spend most of their time turning tensor data
// into floats, and most of strconv's time on such literals goes to its
// general-purpose digit reader (underscores, hexadecimal, infinities), not
// to the conversion. ParseFloat32 reads the digits of a JSON literal in one
// tight pass and converts them with the same algorithms strconv uses for
// float32 (the exact small-number path, then Eisel-Lemire); what those
// cannot decide (more than 19 digits, subnormal or overflowing results, a
// rare ambiguous halfway case) goes to strconv itself, so every result and
// every error is strconv's.
package jsonnum
