package servingapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/feature/serving/servingtest"
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
	fx := newFixture(f, serving.Options{})
	fx.Put(f, "user_stats", i64(1), now.Add(-(10 * time.Minute)), i64(7), f64(0.5), str("ann"), servingtest.Emb3())
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

// FuzzWriteRequest feeds arbitrary bodies to /push and
// /write-to-online-store (the df decoder, scalar columns repeated over
// the rows, and the row checks): never a panic, 200 or a JSON error with
// a reason, and the fake store never holds more rows than the body could
// describe.
func FuzzWriteRequest(f *testing.F) {
	for _, s := range []string{
		`/push {"push_source_name":"user_push","df":{"user_id":[1,2],"level":[1,2],"event_timestamp":["2026-01-02T11:00:00Z","2026-01-02 11:00:00"]}}`,
		`/push {"push_source_name":"user_push","df":{"user_id":[1,2],"level":5,"event_timestamp":"2026-01-02T11:50:00Z"}}`,
		`/push {"push_source_name":"user_push","df":{"user_id":3,"level":9,"event_timestamp":1767355200}}`,
		`/push {"push_source_name":"user_push","df":{"user_id":[1],"level":{"a":1}}}`,
		`/push {"push_source_name":"user_push","df":{"user_id":[1,2,3],"level":[1]}}`,
		`/write-to-online-store {"feature_view_name":"user_stats","df":{"user_id":[1],"clicks":[7],"score":[0.5],"name":["a"],"emb":[[1,2,3]],"event_timestamp":["2026-01-02T11:55:00"],"created":[null]}}`,
		`/write-to-online-store {"feature_view_name":"route_stats","df":{"route_id":"r1","eta":1,"blob":null,"ts":"2026-01-02T11:00:00Z"}}`,
		`/write-to-online-store {"feature_view_name":"user_live","df":null}`,
		`/write-to-online-store {"feature_view_name":"user_live","df":[]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		path, body, ok := strings.Cut(in, " ")
		if !ok || (path != "/push" && path != "/write-to-online-store") {
			return
		}
		fx := newFixture(t, serving.Options{})
		rec := httptest.NewRecorder()
		fx.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		switch rec.Code {
		case http.StatusOK:
			if len(fx.Store.Rows) > len(body) {
				t.Fatalf("%d rows stored from a %d-byte body", len(fx.Store.Rows), len(body))
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusServiceUnavailable:
			if !strings.Contains(rec.Body.String(), `"reason":`) {
				t.Fatalf("error without a reason: %s", rec.Body.String())
			}
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, in, rec.Body.String())
		}
	})
}

// FuzzScanKeyColumn checks the entity columns' fast scanner against the
// JSON tokenizer it stands in for: on every column it accepts, the
// values are the tokenizer's.
func FuzzScanKeyColumn(f *testing.F) {
	for _, s := range []string{
		`[1,2,3]`, `[ -7 , 0 ,12 ]`, `[]`, `[ ]`, `["a","b c"]`, `["é"]`, `["a\"b"]`, `[01]`, `[1.0]`, `[1e3]`,
		`[-0]`, `[9223372036854775807]`, `[9223372036854775808]`, `[2147483648]`, `[null]`, `[1,]`, `["\u0041"]`,
	} {
		f.Add(s, uint8(0), 3)
	}
	kinds := []feature.Kind{feature.KindInt64, feature.KindInt32, feature.KindString}
	f.Fuzz(func(t *testing.T, col string, k uint8, maxRows int) {
		if !json.Valid([]byte(col)) {
			return // the body's decoder refuses it before
		}
		maxRows = max(maxRows%8, 1)
		kind := kinds[int(k)%len(kinds)]
		got, ok := scanKeyColumn([]byte(col), kind, maxRows)
		if !ok {
			return
		}
		want, err := decodeEntityTokens("k", json.RawMessage(col), kind, maxRows)
		if err != nil {
			t.Fatalf("%s (%s, max %d): scanned %v, the tokenizer refuses it: %v", col, kind, maxRows, got, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s (%s, max %d): scanned %v, the tokenizer reads %v", col, kind, maxRows, got, want)
		}
	})
}
