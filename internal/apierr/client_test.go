package apierr

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCleanReason(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"tensor_size_mismatch", "tensor_size_mismatch"},
		{"QUEUE_FULL", "queue_full"},
		{"v2_error", "v2_error"},
		{"", ""},
		{"has space", ""},
		{"dash-ed", ""},
		{"é", ""},
		{strings.Repeat("a", 64), strings.Repeat("a", 64)},
		{strings.Repeat("a", 65), ""},
	} {
		require.Equal(t, tt.want, CleanReason(tt.in), tt.in)
	}
}

func TestParseError(t *testing.T) {
	tests := []struct {
		name        string
		body        string
		msg, reason string
		ok          bool
	}{
		{"sluice", `{"error":"model 'm' not found","reason":"model_not_found","request_id":"r"}` + "\n", "model 'm' not found", "model_not_found", true},
		{"triton has no reason", `{"error":"failed to parse the request JSON buffer"}`, "failed to parse the request JSON buffer", "", true},
		{"odd reason dropped", `{"error":"x","reason":"not a code"}`, "x", "", true},
		{"long message cut", `{"error":"` + strings.Repeat("a", 600) + `"}`, strings.Repeat("a", MaxMessageLen) + "…", "", true},
		{"plain text", "upstream connect error or disconnect/reset before headers", "", "", false},
		{"wrong types", `{"error":5}`, "", "", false},
		{"empty", "", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg, reason, ok := ParseError([]byte(tt.body))
			require.Equal(t, tt.msg, msg)
			require.Equal(t, tt.reason, reason)
			require.Equal(t, tt.ok, ok)
		})
	}
}

// TestWriteThenParse checks that what WriteError writes, ParseError reads.
func TestWriteThenParse(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteError(rec, http.StatusBadRequest, ReasonInvalidShape, "input 'x': \"quoted\" <tag> \x01", RequestID("r-1"))
	msg, reason, ok := ParseError(rec.Body.Bytes())
	require.True(t, ok)
	require.Equal(t, "input 'x': \"quoted\" <tag> \x01", msg)
	require.Equal(t, ReasonInvalidShape, reason)
}
