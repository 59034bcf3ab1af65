// Package scrub removes internal details from messages that leave the
// process: network addresses (IPv4 and IPv6, with or without a port, and
// "host:port" after a dial/read/write verb) and absolute file paths. The
// edges run server-error messages through Message before writing them to a
// client; the unscrubbed text belongs in the log line that carries the
// same request id.
package scrub

import (
	"regexp"
	"strings"
)

var (
	// socket errors name both ends: "read tcp 10.0.0.5:41294->10.0.0.7:6379".
	socket = regexp.MustCompile(`\b(?:dial|read|write|connect|accept)\s+(?:tcp|tcp4|tcp6|udp|unix)\s+\S+`)
	ipv4   = regexp.MustCompile(`\b(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?\b`)
	ipv6   = regexp.MustCompile(`\[[0-9A-Fa-f:.%a-zA-Z]*:[0-9A-Fa-f:.%a-zA-Z]*\](?::\d{1,5})?`)
	// hostPort catches "name:port" after lookup/dial wording.
	hostPort = regexp.MustCompile(`\b(?:lookup|dial|address|endpoint)\s+[A-Za-z0-9.\-]+:\d{1,5}\b`)
	// path is an absolute path of at least two segments.
	path = regexp.MustCompile(`(?:^|[\s"'(=])(/[A-Za-z0-9._\-]+(?:/[A-Za-z0-9._\-@+]+)+/?)`)
)

// Message returns s with internal addresses and absolute paths replaced
// by placeholders ("[address]", "[path]").
func Message(s string) string {
	if !strings.ContainsAny(s, ":/.") {
		return s
	}
	s = socket.ReplaceAllStringFunc(s, func(m string) string {
		if strings.HasSuffix(m, ":") {
			return "[socket]:"
		}
		return "[socket]"
	})
	s = hostPort.ReplaceAllStringFunc(s, func(m string) string {
		verb, _, _ := strings.Cut(m, " ")
		return verb + " [address]"
	})
	s = ipv6.ReplaceAllString(s, "[address]")
	s = ipv4.ReplaceAllString(s, "[address]")
	s = path.ReplaceAllStringFunc(s, func(m string) string {
		i := strings.IndexByte(m, '/')
		return m[:i] + "[path]"
	})
	return s
}
