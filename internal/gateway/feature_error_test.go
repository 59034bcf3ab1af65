package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature/online"
	"github.com/sluice-ml/sluice/internal/feature/registry"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/gateway"
)

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestFeatureErrorBodies: when the feature read fails, the client's body
// names no internal address or socket error; the log line keeps them,
// with the request id. Errors about the request or the features pass
// through as the feature server wrote them.
func TestFeatureErrorBodies(t *testing.T) {
	cause := "read tcp 127.0.0.1:41294->127.0.0.1:28079: i/o timeout"
	internals := regexp.MustCompile(`\d{1,3}(\.\d{1,3}){3}|:\d{2,5}\b|\btcp\b|i/o timeout`)
	cases := []struct {
		name    string
		err     error
		code    int
		reason  string
		message string // the body's error, exactly
		logged  bool   // the detail goes to the log
	}{
		{
			"store unavailable, as the feature server reports it",
			&apierr.Error{Kind: apierr.KindUnavailable, Reason: serving.ReasonStoreUnavailable, Msg: "read online features", Err: fmt.Errorf("read redis: %w: %s", online.ErrUnavailable, cause)},
			http.StatusServiceUnavailable, serving.ReasonStoreUnavailable, `service "eta": online store unavailable`, true,
		},
		{
			"store unavailable, plain error",
			fmt.Errorf("read redis: %w: %s", online.ErrUnavailable, cause),
			http.StatusServiceUnavailable, serving.ReasonStoreUnavailable, `service "eta": online store unavailable`, true,
		},
		{
			"internal",
			&apierr.Error{Kind: apierr.KindInternal, Reason: "internal", Msg: "feature view 'user_stats', entity row 0", Err: fmt.Errorf("decode /var/lib/sluice/x: %s", cause)},
			http.StatusInternalServerError, gateway.ReasonInternal, `service "eta": the feature read failed`, true,
		},
		{
			"stale view passes through",
			staleErr(),
			http.StatusServiceUnavailable, serving.ReasonViewStale, staleErr().Error(), false,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logs := &lockedBuffer{}
			logger := slog.New(slog.NewJSONHandler(logs, nil))
			cfg := parseConfig(t, gatewayYAML(yamlOpts{gateway: []string{anonAllowed}}))
			repo := loadRepo(t)
			features := newFakeFeatures(repo)
			g, err := gateway.New(cfg, gateway.Options{
				Models: newFakeModel(), Remote: newFakeRemote(), Features: features,
				FeatureRepo: func() *registry.Repo { return repo },
			}, logger, nil)
			require.NoError(t, err)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				require.NoError(t, g.Close(ctx))
			})
			seedFeatures(features)
			features.setErr(tc.err)

			res := call(t, g, http.MethodPost, etaPath, okBody, "X-Request-Id", "req-feature-err-1")
			requireError(t, res, tc.code, tc.reason)
			require.Equal(t, tc.message, res.Error)
			require.NotRegexp(t, internals, string(res.Body))
			if tc.logged {
				require.Regexp(t, `"msg":"feature read failed"[^\n]*"request_id":"req-feature-err-1"[^\n]*127\.0\.0\.1:28079`, logs.String())
			}
		})
	}
}
