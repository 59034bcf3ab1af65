package objstore

import (
	"net/http"

	"golang.org/x/oauth2"
)

// oauthTransport adds a bearer token to each request.
type oauthTransport struct {
	src  oauth2.TokenSource
	next http.RoundTripper
}

func (t *oauthTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	tok, err := t.src.Token()
	if err != nil {
		return nil, err
	}
	r2 := r.Clone(r.Context())
	tok.SetAuthHeader(r2)
	return t.next.RoundTrip(r2)
}
