package authzspec

import (
	"strings"
	"testing"
)

func TestParseTokens(t *testing.T) {
	a, b := HashToken("secret-a"), HashToken("secret-b")
	tests := []struct {
		name    string
		tokens  []Token
		wantIDs []string // the tokens returned
		wantErr []string // substrings, in order; none: no error
	}{
		{
			name:    "valid",
			tokens:  []Token{{ID: "ops", SHA256: a, Role: "operate"}, {ID: "ro", SHA256: " " + b + " ", Role: "read"}},
			wantIDs: []string{"ops", "ro"},
		},
		{
			name:    "duplicate id and same secret",
			tokens:  []Token{{ID: "x", SHA256: a, Role: "read"}, {ID: "x", SHA256: b, Role: "read"}, {ID: "y", SHA256: a, Role: "read"}},
			wantIDs: []string{"x", "x"},
			wantErr: []string{`token "x": duplicate id`, `tokens "x" and "y": same secret`},
		},
		{
			name:    "every field wrong",
			tokens:  []Token{{SHA256: "abc", Token: "plain", Role: "none"}},
			wantErr: []string{"tokens[0]: empty id", "tokens[0]: a plain token must not reach the policy", `tokens[0]: role "none": want read or operate`, "tokens[0]: token_sha256 must be 64 hex digits"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseTokens(tt.tokens)
			var ids []string
			for _, g := range got {
				ids = append(ids, g.ID)
				if g.Hash == [32]byte{} {
					t.Errorf("token %q: empty hash", g.ID)
				}
			}
			if strings.Join(ids, ",") != strings.Join(tt.wantIDs, ",") {
				t.Errorf("tokens = %q, want %q", ids, tt.wantIDs)
			}
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("ParseTokens: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseTokens: no error, want %q", tt.wantErr)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.wantErr) {
				t.Fatalf("errors = %q, want %d of them", lines, len(tt.wantErr))
			}
			for i, w := range tt.wantErr {
				if !strings.Contains(lines[i], w) {
					t.Errorf("error %d = %q, want it to contain %q", i, lines[i], w)
				}
			}
		})
	}
}
