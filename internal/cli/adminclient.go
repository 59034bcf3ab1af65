package cli

import (
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluice-ml/sluice/internal/tlsconfig"
)

// tokenEnv names the environment variable the admin commands read their
// token from when --token is not given.
const tokenEnv = "SLUICE_ADMIN_TOKEN" //nolint:gosec // G101: the name of a variable, not a credential

// adminAuth are the credentials of the commands that call an admin API
// (status, rollout): a bearer token and, for an https admin port, the CA
// that signed its certificate.
type adminAuth struct {
	token  string
	caFile string
}

func (a *adminAuth) register(fl *pflag.FlagSet) {
	fl.StringVar(&a.token, "token", "", "admin token (role read, or operate to change state); default $"+tokenEnv)
	fl.StringVar(&a.caFile, "ca-file", "", "PEM CA bundle that signed an https admin port's certificate; default the system roots")
}

// client returns an HTTP client that presents the token on every request.
func (a *adminAuth) client(timeout time.Duration) (*http.Client, error) {
	token := a.token
	if token == "" {
		token = os.Getenv(tokenEnv)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if a.caFile != "" {
		cfg, err := tlsconfig.ClientConfig(tlsconfig.ClientOptions{CAFile: a.caFile})
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		tr.TLSClientConfig = cfg
	}
	return &http.Client{Timeout: timeout, Transport: &bearer{token: token, next: tr}}, nil
}

// bearer adds "Authorization: Bearer <token>" to each request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token == "" || r.Header.Get("Authorization") != "" {
		return b.next.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}
