package apierr

import (
	"encoding/json"
	"strings"
)

// maxReasonLen bounds a reason read from the network.
const maxReasonLen = 64

// CleanReason returns r lower-cased when it looks like a reason code (1 to
// 64 ASCII letters, digits and underscores), or "". Clients pass reasons
// read from the network through it, so that anything odd is dropped
// rather than passed on to logs, metrics or records.
func CleanReason(r string) string {
	if r == "" || len(r) > maxReasonLen {
		return ""
	}
	for i := range len(r) {
		c := r[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' {
			return ""
		}
	}
	return strings.ToLower(r)
}

// ParseError reads an HTTP error answer's body as a client: the message
// of {"error": ..., "reason": ...}, cut to MaxMessageLen bytes of valid
// UTF-8, and its reason passed through CleanReason, each "" when absent.
// ok reports whether body is a JSON object at all; a server other than
// Sluice (or a proxy in front of it) may answer plain text.
func ParseError(body []byte) (msg, reason string, ok bool) {
	var e struct {
		Error  string `json:"error"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		return "", "", false
	}
	return Truncate(e.Error, MaxMessageLen), CleanReason(e.Reason), true
}
