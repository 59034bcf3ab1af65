package httpapi

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-ml/sluice/internal/apierr"
)

func FuzzDecodeGenerate(f *testing.F) {
	f.Add([]byte(`{"IN":[[1,2,3,4]],"parameters":{"stream":false}}`))
	f.Add([]byte(`{"IN":1}`))
	f.Add([]byte(`{"IN":[[1,2],[3]]}`))
	f.Add([]byte(`[1]`))
	h := New(newFakeModels(), Options{}, nil, nil)
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := h.decodeGenerate(t.Context(), "identity", "", data)
		if err != nil {
			var ie *apierr.Error
			if !errors.As(err, &ie) || ie.Reason == "" || ie.Kind != apierr.KindInvalid && ie.Kind != apierr.KindUnsupported {
				t.Fatalf("error is not a client error with a reason: %#v", err)
			}
			return
		}
		for i := range req.Inputs {
			if err := req.Inputs[i].CheckSize(); err != nil {
				t.Fatalf("input %q: %v", req.Inputs[i].Name, err)
			}
		}
	})
}

// The generate extension maps a JSON object onto the model's inputs (a
// batch dimension of 1 added for a batching model) and answers each output
// by name, over /generate as one JSON object and over /generate_stream as
// one Server-Sent Event per response.
func TestGenerate(t *testing.T) {
	fm := newFakeModels()
	h := New(fm, Options{}, nil, nil)
	post := func(path, body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		return rec
	}
	rec := post("/v2/models/identity/generate", `{"IN":[1,2,3,4.5],"parameters":{"p":"v"}}`)
	if rec.Code != http.StatusOK || rec.Body.String() != `{"model_name":"identity","model_version":"1","OUT":[1,2,3,4.5]}` {
		t.Errorf("generate = %d %s", rec.Code, rec.Body)
	}
	fm.mu.Lock()
	got := fm.lastReq
	fm.mu.Unlock()
	if got == nil || got.Inputs[0].Shape.String() != "[1,4]" || got.Parameters["p"] != "v" {
		t.Errorf("request = %+v", got)
	}
	rec = post("/v2/models/identity/versions/1/generate_stream", `{"IN":[[1,2,3,4]]}`)
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/event-stream" ||
		rec.Body.String() != "data: {\"model_name\":\"identity\",\"model_version\":\"1\",\"OUT\":[1,2,3,4]}\n\n" {
		t.Errorf("generate_stream = %d %q", rec.Code, rec.Body)
	}
	for _, c := range []struct{ body, reason string }{
		{`{"IN":[[1,2],[3]]}`, reasonInvalidGenerate},
		{`{"IN":{"a":1}}`, reasonInvalidGenerate},
		{`[1]`, reasonInvalidGenerate},
		{`{"X":1}`, "unknown_input"},
		{`{"IN":[1,2]}`, "invalid_shape"},
	} {
		rec := post("/v2/models/identity/generate_stream", c.body)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"reason":"`+c.reason+`"`) {
			t.Errorf("%s: %d %s, want 400 %s", c.body, rec.Code, rec.Body, c.reason)
		}
	}
}
