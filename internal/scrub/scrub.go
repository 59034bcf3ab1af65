// Package scrub removes internal details from messages that leave the
// process: URLs, network addresses (IPv4 and IPv6, with or without a
// port), host names with a port ("localhost:24398",
// "models-0.models.svc:8001"), a host name after "lookup", and absolute
// file paths. The
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
	// hostPort catches "name[:port]" after lookup/dial wording.
	hostPort = regexp.MustCompile(`\b(?:(?:dial|address|endpoint)\s+[A-Za-z0-9.\-]+:\d{1,5}|lookup\s+[A-Za-z0-9.\-]+(?::\d{1,5})?)\b`)
	// url is a URL with a scheme: its host, port and path are all internal.
	url = regexp.MustCompile(`\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s"'<>]+`)
	// namePort is a host name with a port anywhere ("ModelInfer
	// localhost:24397: ..."). The name must hold a letter (so "12:30" is
	// left alone) and the port must not run on into another ":digit" (a
	// time, an IPv6 address).
	namePort = regexp.MustCompile(`(?:^|[^A-Za-z0-9.\-_/\[])([A-Za-z0-9](?:[A-Za-z0-9\-_]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-_]*[A-Za-z0-9])?)*:\d{1,5})(?:$|[^0-9:A-Za-z]|:$|:[^0-9])`)
	// path is an absolute path of at least two segments.
	path = regexp.MustCompile(`(?:^|[\s"'(=])(/[A-Za-z0-9._\-]+(?:/[A-Za-z0-9._\-@+]+)+/?)`)
)

// Message returns s with URLs, internal addresses and absolute paths
// replaced by placeholders ("[url]", "[address]", "[path]").
func Message(s string) string {
	if !strings.ContainsAny(s, ":/.") {
		return s
	}
	s = url.ReplaceAllString(s, "[url]")
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
	s = replaceNamePorts(s)
	s = path.ReplaceAllStringFunc(s, func(m string) string {
		i := strings.IndexByte(m, '/')
		return m[:i] + "[path]"
	})
	return s
}

// replaceNamePorts replaces each "name:port" whose name holds a letter
// with "[address]". The expression takes one guard character on either
// side, so a match right after another is found by the next pass.
func replaceNamePorts(s string) string {
	for range 8 { // bounded; each pass replaces every other match at least
		locs := namePort.FindAllStringSubmatchIndex(s, -1)
		var b strings.Builder
		last := 0
		for _, l := range locs {
			host := s[l[2]:l[3]]
			name, _, _ := strings.Cut(host, ":")
			if !strings.ContainsFunc(name, isLetter) {
				continue
			}
			b.WriteString(s[last:l[2]])
			b.WriteString("[address]")
			last = l[3]
		}
		if last == 0 {
			return s
		}
		b.WriteString(s[last:])
		s = b.String()
	}
	return s
}

func isLetter(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }
