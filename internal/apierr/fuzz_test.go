package apierr

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// FuzzFromGRPC feeds arbitrary bytes, as a hostile server could send them
// in grpc-status-details-bin, through protobuf decoding of a status and
// then FromGRPC. Nothing may panic; the result is a domain error whose
// reason is a short lower-case code and whose message is valid UTF-8 of
// bounded length.
func FuzzFromGRPC(f *testing.F) {
	info, err := anypb.New(&errdetails.ErrorInfo{Reason: "model_not_found", Domain: ErrorDomain})
	if err != nil {
		f.Fatal(err)
	}
	for _, st := range []*spb.Status{
		{Code: int32(codes.NotFound), Message: "model 'm' not found", Details: []*anypb.Any{info}},
		{Code: int32(codes.Unavailable), Message: "no reason, as Triton sends it"},
		{Code: 99, Message: strings.Repeat("é", 600)},
	} {
		b, err := proto.Marshal(st)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var p spb.Status
		if proto.Unmarshal(data, &p) != nil || p.GetCode() == 0 {
			return // not a status, or OK, which carries no error
		}
		ie, ok := errors.AsType[*Error](FromGRPC(status.ErrorProto(&p)))
		if !ok {
			t.Fatalf("FromGRPC of code %d is no *apierr.Error", p.GetCode())
		}
		if ie.Reason == "" || len(ie.Reason) > maxReasonLen {
			t.Fatalf("reason %q", ie.Reason)
		}
		for i := range len(ie.Reason) {
			if c := ie.Reason[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
				t.Fatalf("reason %q is not a lower-case code", ie.Reason)
			}
		}
		if !utf8.ValidString(ie.Msg) || len(ie.Msg) > MaxMessageLen+len("…") {
			t.Fatalf("message of %d bytes, valid UTF-8 %v", len(ie.Msg), utf8.ValidString(ie.Msg))
		}
	})
}

// FuzzParseError reads arbitrary bytes as an HTTP error answer's body, as
// a hostile or foreign server could send it. Nothing may panic; what comes
// back is bounded, valid UTF-8 and a clean reason code, and a body that
// WriteError wrote reads back as written.
func FuzzParseError(f *testing.F) {
	f.Add([]byte(`{"error":"model 'm' not found","reason":"model_not_found"}`))
	f.Add([]byte(`{"error":"x","reason":"NOT A CODE"}`))
	f.Add([]byte("upstream connect error"))
	f.Fuzz(func(t *testing.T, body []byte) {
		msg, reason, _ := ParseError(body)
		if !utf8.ValidString(msg) || len(msg) > MaxMessageLen+len("…") {
			t.Fatalf("message of %d bytes, valid UTF-8 %v", len(msg), utf8.ValidString(msg))
		}
		if reason != CleanReason(reason) {
			t.Fatalf("reason %q is not clean", reason)
		}
		if !utf8.Valid(body) || len(body) > MaxMessageLen {
			return
		}
		rec := httptest.NewRecorder()
		WriteError(rec, http.StatusBadRequest, "invalid_request", string(body))
		got, gotReason, ok := ParseError(rec.Body.Bytes())
		if !ok || got != string(body) || gotReason != "invalid_request" {
			t.Fatalf("round trip of %q: %q %q %v", body, got, gotReason, ok)
		}
	})
}
