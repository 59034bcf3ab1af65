package auth

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/config"
)

func testClients() []config.Client {
	return []config.Client{
		{ID: "alice", APIKeySHA256: HashKey("alice-key"), Priority: 1},
		{ID: "bob", APIKeySHA256: HashKey("bob-key")},
	}
}

func request(headers map[string]string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v2/models/m/infer", nil)
	for k, v := range headers {
		r.Header.Set(k, v)
	}
	return r
}

func TestAuthenticate(t *testing.T) {
	for _, anon := range []bool{false, true} {
		a, err := New(testClients(), anon)
		require.NoError(t, err)
		for _, tc := range []struct {
			name    string
			headers map[string]string
			want    Identity
			reason  string // non-empty: expect a 401 with this reason
		}{
			{"bearer", map[string]string{"Authorization": "Bearer alice-key"}, Identity{ClientID: "alice", Priority: 1}, ""},
			{"bearer lower-case scheme", map[string]string{"Authorization": "bearer bob-key"}, Identity{ClientID: "bob"}, ""},
			{"x-api-key", map[string]string{"x-api-key": "bob-key"}, Identity{ClientID: "bob"}, ""},
			{"authorization wins over x-api-key", map[string]string{"Authorization": "Bearer alice-key", "x-api-key": "bob-key"}, Identity{ClientID: "alice", Priority: 1}, ""},
			{"non-bearer authorization falls back to x-api-key", map[string]string{"Authorization": "Basic Zm9vOmJhcg==", "x-api-key": "bob-key"}, Identity{ClientID: "bob"}, ""},
			{"unknown bearer key", map[string]string{"Authorization": "Bearer mallory"}, Identity{}, ReasonInvalidAPIKey},
			{"unknown x-api-key", map[string]string{"x-api-key": "alice-key2"}, Identity{}, ReasonInvalidAPIKey},
			{"hash instead of key", map[string]string{"x-api-key": HashKey("alice-key")}, Identity{}, ReasonInvalidAPIKey},
		} {
			t.Run(tc.name, func(t *testing.T) {
				id, aerr := a.Authenticate(request(tc.headers))
				if tc.reason != "" {
					require.NotNil(t, aerr)
					require.Equal(t, apierr.KindUnauthenticated, aerr.Kind)
					require.Equal(t, tc.reason, aerr.Reason)
					require.Equal(t, Identity{}, id)
					for _, v := range tc.headers {
						require.NotContains(t, aerr.Error(), v, "error must not echo the key")
					}
					return
				}
				require.Nil(t, aerr)
				require.Equal(t, tc.want, id)
			})
		}
	}
}

func TestMissingKey(t *testing.T) {
	for _, headers := range []map[string]string{
		nil,
		{"Authorization": "Bearer "},
		{"Authorization": "Basic Zm9vOmJhcg=="},
		{"x-api-key": "  "},
	} {
		closed, err := New(testClients(), false)
		require.NoError(t, err)
		_, aerr := closed.Authenticate(request(headers))
		require.NotNil(t, aerr)
		require.Equal(t, apierr.KindUnauthenticated, aerr.Kind)
		require.Equal(t, ReasonMissingAPIKey, aerr.Reason)

		open, err := New(testClients(), true)
		require.NoError(t, err)
		id, aerr := open.Authenticate(request(headers))
		require.Nil(t, aerr)
		require.Equal(t, Identity{ClientID: AnonymousClientID, Anonymous: true}, id)
	}
}

func TestNoClients(t *testing.T) {
	a, err := New(nil, false)
	require.NoError(t, err)
	_, aerr := a.Authenticate(request(map[string]string{"x-api-key": "anything"}))
	require.NotNil(t, aerr)
	require.Equal(t, ReasonInvalidAPIKey, aerr.Reason)
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		clients []config.Client
	}{
		{"empty id", []config.Client{{APIKeySHA256: HashKey("k")}}},
		{"not hex", []config.Client{{ID: "a", APIKeySHA256: "zz"}}},
		{"short hash", []config.Client{{ID: "a", APIKeySHA256: HashKey("k")[:62]}}},
		{"duplicate id", []config.Client{{ID: "a", APIKeySHA256: HashKey("k1")}, {ID: "a", APIKeySHA256: HashKey("k2")}}},
		{"duplicate key", []config.Client{{ID: "a", APIKeySHA256: HashKey("k")}, {ID: "b", APIKeySHA256: HashKey("k")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.clients, false)
			require.Error(t, err)
		})
	}
}

func TestUpperCaseHexAccepted(t *testing.T) {
	a, err := New([]config.Client{{ID: "a", APIKeySHA256: "  " + upper(HashKey("k")) + "\n"}}, false)
	require.NoError(t, err)
	id, aerr := a.Authenticate(request(map[string]string{"x-api-key": "k"}))
	require.Nil(t, aerr)
	require.Equal(t, "a", id.ClientID)
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'f' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}
