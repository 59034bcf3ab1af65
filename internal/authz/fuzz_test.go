package authz

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-ml/sluice/internal/authz/authzspec"
)

func FuzzParseBearer(f *testing.F) {
	for _, s := range []string{
		"Bearer abc", "bearer abc", "BEARER\tabc", "  Bearer   a b  ", "Bearer", "Bearer ",
		"Basic Zm9vOmJhcg==", "Bearer a\x00b", "Bearer a\r\nX-Evil: 1", "Bearer \u00a0x\u00a0",
		"Bearer " + strings.Repeat("x", MaxCredentialBytes),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		tok, ok := ParseBearer(header)
		if !ok {
			if tok != "" {
				t.Fatalf("ParseBearer(%q) refused but returned %q", header, tok)
			}
		} else {
			if tok == "" || len(tok) > MaxCredentialBytes || authzspec.HasControl(tok) ||
				strings.Trim(tok, " \t") != tok || !strings.Contains(header, tok) {
				t.Fatalf("ParseBearer(%q) = %q: not a clean token from the header", header, tok)
			}
			again, ok := ParseBearer("Bearer " + tok)
			if !ok || again != tok {
				t.Fatalf("round trip of %q: got %q, %v", tok, again, ok)
			}
		}
		// The whole credential path must not panic on any header, and must
		// never let an unknown credential through.
		p, err := NewPolicy(PolicyOptions{Tokens: []Token{{ID: "a", SHA256: HashToken("known"), Role: "operate"}}, OpenReads: true})
		if err != nil {
			t.Fatal(err)
		}
		r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://127.0.0.1/x", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header["Authorization"] = []string{header}
		r.Header["X-Sluice-Token"] = []string{header}
		pr, err := p.Authorize(r, RoleRead, "")
		if err == nil && pr.Via == ViaToken && tok != "known" && strings.Trim(header, " \t") != "known" {
			t.Fatalf("header %q authenticated as %q", header, pr.ID)
		}
	})
}

func FuzzParseRestriction(f *testing.F) {
	for _, s := range []string{
		"shared-memory,model-config,model-repository,statistics,trace:admin-key=admin-value",
		"inference:k=v", "model-repository:key=a=b:c", "health", "health:k", ":k=v", "health:=v",
		"health:k=", "health,,metadata:k=v", "health:my key=v", "health:authorization=v", "health:k= v",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, flag string) {
		r, err := ParseRestriction(flag)
		if err != nil {
			return // rejecting input is fine; panicking is not
		}
		if len(r.Groups) == 0 || r.Key == "" || r.Value == "" {
			t.Fatalf("ParseRestriction(%q) = %+v: accepted an empty part", flag, r)
		}
		// A parsed rule formats back to the same flag and parses the same.
		back := strings.Join(r.Groups, ",") + ":" + r.Key + "=" + r.Value
		if back != flag {
			t.Fatalf("ParseRestriction(%q) formats back as %q", flag, back)
		}
		if _, err := NewPolicy(PolicyOptions{Restrictions: []Restriction{r}}); err != nil {
			t.Fatalf("NewPolicy refuses what ParseRestriction accepted (%q): %v", flag, err)
		}
	})
}
