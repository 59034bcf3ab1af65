package serving

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzGetOnlineFeaturesRequest feeds arbitrary bodies to the HTTP edge:
// it must never panic and must answer 200 or a JSON error.
func FuzzGetOnlineFeaturesRequest(f *testing.F) {
	for _, s := range []string{
		`{"features":["user_stats:clicks","user_stats:emb"],"entities":{"user_id":[1,2,3]}}`,
		`{"feature_service":"eta_svc","entities":{"user_id":[1],"route_id":["r1"]},"full_feature_names":true}`,
		`{"features":["user_recent:recent"],"entities":{"user_id":[1,5]},"event_timestamp":"2026-01-02T11:00:00Z"}`,
		`{"features":["user_stats:clicks"],"entities":{"user_id":["1"]}}`,
		`{"features":["route_stats:eta"],"entities":{"route_id":[null,{},[]]}}`,
		`{"features":[],"entities":{}}`,
		`{"features":["a:b:c"]}`,
		`[]`, `null`, `{"entities":{"user_id":[1e400]}}`,
		`{"features":["user_stats:clicks"],"entities":{"user_id":[[1],{"a":1}]}}`,
		`{"features":["user_stats:clicks"],"entities":{"user_id":[1,[2,[3]],4]}}`,
	} {
		f.Add(s)
	}
	fx := newFixture(f, Options{})
	fx.put(f, "user_stats", i64(1), now.Add(-time10m), i64(7), f64(0.5), str("ann"), emb3())
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		fx.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/get-online-features", strings.NewReader(body)))
		switch rec.Code {
		case http.StatusOK:
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusServiceUnavailable:
			if !strings.Contains(rec.Body.String(), `"reason":`) {
				t.Fatalf("error without a reason: %s", rec.Body.String())
			}
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.String())
		}
	})
}
