package objstore

import (
	"errors"
	"fmt"
	"net"
	"path"
	"strings"
)

// The schemes of object-storage locations, as Triton writes them.
const (
	SchemeS3    = "s3"
	SchemeGCS   = "gs"
	SchemeAzure = "as"
)

// Location is a parsed object-storage URI: a bucket (an Azure container)
// and a prefix inside it.
type Location struct {
	// Scheme is SchemeS3, SchemeGCS or SchemeAzure.
	Scheme string
	// Endpoint is, for an S3-compatible store, its base URL
	// ("https://host:port" or "http://host:port"); empty for AWS S3.
	Endpoint string
	// Account is the Azure storage account; empty for the other schemes.
	Account string
	// Bucket is the bucket, or the Azure container.
	Bucket string
	// Prefix is the path inside the bucket, without leading or trailing
	// slash; empty for the whole bucket.
	Prefix string
}

// IsURI reports whether s names object storage (s3://, gs:// or as://)
// rather than a local path.
func IsURI(s string) bool {
	for _, p := range []string{"s3://", "gs://", "as://"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// Parse parses one of Triton's object-storage URI forms:
//
//	gs://bucket/path
//	s3://bucket/path
//	s3://host:port/bucket/path             an S3-compatible store over HTTP
//	s3://https://host:port/bucket/path     the same over HTTPS
//	as://account/container/path
//
// The path may be empty. Credentials are never part of a location: a URI
// with user information is refused, so that no secret can reach a log
// line through it.
func Parse(uri string) (Location, error) {
	loc, err := parse(uri)
	if err != nil {
		// Never repeat user information ("key:secret@host") in an error.
		shown := uri
		if i := strings.LastIndex(uri, "@"); i >= 0 {
			scheme, _, _ := strings.Cut(uri[:i], "://")
			if scheme == uri[:i] {
				scheme = ""
			} else {
				scheme += "://"
			}
			shown = scheme + "…" + uri[i:]
		}
		return Location{}, fmt.Errorf("object storage location %q: %w", shown, err)
	}
	return loc, nil
}

func parse(uri string) (Location, error) {
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok || !IsURI(uri) {
		return Location{}, errors.New("want s3://, gs:// or as://")
	}
	loc := Location{Scheme: scheme}
	if strings.ContainsAny(rest, "@?#\\") || strings.ContainsRune(rest, 0) {
		return Location{}, errors.New("'@', '?', '#' and '\\' are not allowed (credentials go in the environment or TRITON_CLOUD_CREDENTIAL_PATH)")
	}
	if scheme == SchemeS3 {
		ep, after, err := s3Endpoint(rest)
		if err != nil {
			return Location{}, err
		}
		loc.Endpoint, rest = ep, after
	}
	if strings.HasPrefix(rest, "/") {
		return Location{}, errors.New("no bucket")
	}
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	if scheme == SchemeAzure {
		if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
			return Location{}, errors.New("want as://account/container[/path]")
		}
		loc.Account, parts = parts[0], parts[1:]
	}
	if parts[0] == "" {
		return Location{}, errors.New("no bucket")
	}
	loc.Bucket = parts[0]
	for _, p := range parts[1:] {
		if p == "" || p == "." || p == ".." {
			return Location{}, errors.New("empty, '.' or '..' path segment")
		}
	}
	loc.Prefix = strings.Join(parts[1:], "/")
	return loc, nil
}

// s3Endpoint splits the endpoint of an S3-compatible store off the part of
// an s3:// URI after the scheme. Like Triton, a first segment with a port
// ("host:port") names an endpoint reached over HTTP, and
// "http://host:port" or "https://host:port" names the protocol too.
func s3Endpoint(rest string) (endpoint, after string, err error) {
	proto := "http"
	for _, p := range []string{"http://", "https://"} {
		if strings.HasPrefix(rest, p) {
			proto = strings.TrimSuffix(p, "://")
			rest = rest[len(p):]
			first, tail, _ := strings.Cut(rest, "/")
			if first == "" {
				return "", "", errors.New("no endpoint host")
			}
			return proto + "://" + first, tail, checkHostPort(first, false)
		}
	}
	first, tail, _ := strings.Cut(rest, "/")
	if !strings.Contains(first, ":") {
		return "", rest, nil
	}
	return proto + "://" + first, tail, checkHostPort(first, true)
}

func checkHostPort(hp string, needPort bool) error {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		if needPort {
			return fmt.Errorf("endpoint %q: want host:port", hp)
		}
		host = hp
	}
	if host == "" {
		return fmt.Errorf("endpoint %q: no host", hp)
	}
	for _, c := range port {
		if c < '0' || c > '9' {
			return fmt.Errorf("endpoint %q: port is not a number", hp)
		}
	}
	return nil
}

// String returns the location as a URI in the form Parse reads.
func (l Location) String() string {
	var b strings.Builder
	b.WriteString(l.Scheme)
	b.WriteString("://")
	if l.Endpoint != "" {
		// "host:port" alone means HTTP; an HTTP endpoint without a port
		// keeps its scheme, or it would read back as a bucket.
		hostPort, isHTTP := strings.CutPrefix(l.Endpoint, "http://")
		if _, port, err := net.SplitHostPort(hostPort); isHTTP && err == nil && port != "" {
			b.WriteString(hostPort)
		} else {
			b.WriteString(l.Endpoint)
		}
		b.WriteByte('/')
	}
	if l.Account != "" {
		b.WriteString(l.Account)
		b.WriteByte('/')
	}
	b.WriteString(l.Bucket)
	if l.Prefix != "" {
		b.WriteByte('/')
		b.WriteString(l.Prefix)
	}
	return b.String()
}

// Join returns the location of rel (a slash-separated relative path)
// inside l.
func (l Location) Join(rel string) Location {
	l.Prefix = strings.Trim(path.Join(l.Prefix, rel), "/")
	return l
}

// key returns the object key of rel, relative to the location's prefix.
func (l Location) key(rel string) string {
	if l.Prefix == "" {
		return rel
	}
	if rel == "" {
		return l.Prefix
	}
	return l.Prefix + "/" + rel
}

// WithEndpoint returns l, an s3:// location on AWS, reached at endpoint
// instead: an S3-compatible store's base URL as Feast's
// s3_endpoint_override writes it ("http://host:port", "https://host[:port]",
// or "host:port", which means HTTP). Errors never repeat user information.
func (l Location) WithEndpoint(endpoint string) (Location, error) {
	if l.Scheme != SchemeS3 {
		return Location{}, fmt.Errorf("an endpoint override is only for s3:// locations, not %s://", l.Scheme)
	}
	if l.Endpoint != "" {
		return Location{}, fmt.Errorf("location %s already names its endpoint", l)
	}
	if strings.ContainsAny(endpoint, "@?#\\ ") {
		return Location{}, errors.New("endpoint override: '@', '?', '#', '\\' and spaces are not allowed (credentials go in the environment)")
	}
	rest := strings.TrimSuffix(endpoint, "/")
	proto := "http"
	explicit := false
	for _, p := range []string{"http://", "https://"} {
		if strings.HasPrefix(rest, p) {
			proto, rest, explicit = strings.TrimSuffix(p, "://"), rest[len(p):], true
		}
	}
	if rest == "" || strings.Contains(rest, "/") {
		return Location{}, fmt.Errorf("endpoint override %q: want http://host:port or https://host[:port]", endpoint)
	}
	for _, c := range rest {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && !strings.ContainsRune(".-:[]_", c) {
			return Location{}, fmt.Errorf("endpoint override %q: %q is not allowed in a host", endpoint, c)
		}
	}
	if err := checkHostPort(rest, !explicit); err != nil {
		return Location{}, fmt.Errorf("endpoint override: %w", err)
	}
	if _, _, err := net.SplitHostPort(rest); err != nil && strings.Contains(rest, ":") {
		return Location{}, fmt.Errorf("endpoint override %q: want host:port (an IPv6 address in brackets)", endpoint)
	}
	l.Endpoint = proto + "://" + rest
	return l, nil
}
