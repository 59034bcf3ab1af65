package apierr

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
)

// update rewrites docs/errors.md from Codes:
//
//	go test ./internal/apierr -run TestErrorsPageAgrees -update
var update = flag.Bool("update", false, "rewrite docs/errors.md from Codes")

const root = "../.."

func codeIndex(t *testing.T) map[string]Code {
	t.Helper()
	m := make(map[string]Code, len(Codes))
	for _, c := range Codes {
		m[c.Reason] = c
	}
	return m
}

// TestCodesTable: one row a code, sorted, each a well-formed reason with
// a meaning.
func TestCodesTable(t *testing.T) {
	require.NotEmpty(t, Codes)
	seen := map[string]bool{}
	for i, c := range Codes {
		require.False(t, seen[c.Reason], "%s: two rows", c.Reason)
		seen[c.Reason] = true
		require.Equal(t, c.Reason, CleanReason(c.Reason), "%q is not a reason code", c.Reason)
		require.NotEmpty(t, strings.TrimSpace(c.Meaning), "%s: no meaning", c.Reason)
		require.NotContains(t, c.Meaning, "\n", "%s: a meaning is one line", c.Reason)
		if i > 0 {
			require.Less(t, Codes[i-1].Reason, c.Reason, "Codes is sorted by Reason")
		}
		require.True(t, slices.IsSorted(c.HTTP), "%s: HTTP sorted", c.Reason)
		require.Len(t, slices.Compact(slices.Clone(c.HTTP)), len(c.HTTP), "%s: HTTP repeats", c.Reason)
		for _, h := range c.HTTP {
			require.True(t, h >= 400 && h < 600, "%s: HTTP %d is not an error status", c.Reason, h)
		}
	}
}

// TestEveryReasonConstantIsInTheTable: each Reason… constant of the
// module names a row of Codes, and each row is declared by some
// constant and used (a code nothing raises is a stale row).
func TestEveryReasonConstantIsInTheTable(t *testing.T) {
	s := scanModule(t, root)
	idx := codeIndex(t)
	declared := map[string]bool{}
	for _, c := range s.consts {
		_, ok := idx[c.value]
		require.True(t, ok, "%s: %s = %q is not a row of apierr.Codes (codes.go)", c.pos, c.name, c.value)
		require.True(t, c.used, "%s: %s is used nowhere", c.pos, c.name)
		declared[c.value] = true
	}
	for _, c := range Codes {
		require.True(t, declared[c.Reason], "Codes row %q: no Reason constant declares it", c.Reason)
	}
}

// TestNoInlineReasons: no reason reaches an error as a string literal
// outside a constant declaration, so the scan above sees every code.
func TestNoInlineReasons(t *testing.T) {
	s := scanModule(t, root)
	require.NotEmpty(t, s.sites)
	for _, site := range s.sites {
		require.Empty(t, site.literal, "%s: reason %q is a literal; declare a constant (and a row of apierr.Codes)", site.pos, site.literal)
	}
}

// TestSitesAgreeWithTable: where the source fixes a code's status (an
// Errorf's Kind, a WriteError's status constant) the table lists it.
func TestSitesAgreeWithTable(t *testing.T) {
	s := scanModule(t, root)
	idx := codeIndex(t)
	for _, site := range s.sites {
		if site.value == "" {
			continue
		}
		c, ok := idx[site.value]
		require.True(t, ok, "%s: reason %q is not a row of Codes", site.pos, site.value)
		if site.status != 0 && !slices.Contains(c.HTTP, site.status) {
			t.Errorf("%s: %s answers %d; Codes lists %v", site.pos, site.value, site.status, c.HTTP)
		}
		if site.hasKind && !slices.Contains(c.GRPC, KindCode(site.kind)) {
			t.Errorf("%s: %s is sent as %v over gRPC; Codes lists %v", site.pos, site.value, KindCode(site.kind), c.GRPC)
		}
	}
}

// TestScannerSeesWhatItLooksFor keeps the checks above honest: on a
// made-up package the scan finds the literal, the constant, its status,
// a helper that hands its reason on, and helpers that hand on the status
// or the kind with it.
func TestScannerSeesWhatItLooksFor(t *testing.T) {
	dir := t.TempDir()
	src := `package p

import (
	"net/http"

	"github.com/sluice-ml/sluice/internal/apierr"
)

const ReasonKnown = "known_reason"

func bad(k string) error { return apierr.Errorf(apierr.KindInvalid, k, "x") }

func writeErr(w http.ResponseWriter, code int, reason string) { apierr.WriteError(w, code, reason, "x") }

func kindErr(k apierr.Kind, reason string) error { return apierr.Errorf(k, reason, "x") }

func f(w http.ResponseWriter) error {
	apierr.WriteError(w, http.StatusConflict, "inline_reason", "x")
	_ = &apierr.Error{Kind: apierr.KindNotFound, Reason: ReasonKnown}
	writeErr(w, http.StatusForbidden, "status_helper")
	_ = kindErr(apierr.KindUnavailable, "kind_helper")
	return bad("via_helper")
}
`
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "p"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p", "p.go"), []byte(src), 0o600))
	s := scanModule(t, dir)
	require.Len(t, s.consts, 1)
	require.Equal(t, "known_reason", s.consts[0].value)
	require.True(t, s.consts[0].used)
	var got []string
	for _, site := range s.sites {
		got = append(got, fmt.Sprintf("%s/%s/%d", site.literal, site.value, site.status))
	}
	require.ElementsMatch(t, []string{
		"/known_reason/404", "inline_reason/inline_reason/409", "via_helper/via_helper/400", "//400",
		"status_helper/status_helper/403", "kind_helper/kind_helper/503", "//0", "//0",
	}, got)
}

// renderErrorsPage is docs/errors.md: Codes as a table.
func renderErrorsPage() []byte {
	var b bytes.Buffer
	b.WriteString(`# Error reason codes

<!-- Generated from internal/apierr/codes.go; do not edit. Regenerate with
     go test ./internal/apierr -run TestErrorsPageAgrees -update -->

Every error answer of every Sluice server carries a reason code: the
` + "`reason`" + ` member of the JSON body ` + "`{\"error\": \"...\", \"reason\": \"...\"}`" + ` and the
Reason of the ` + "`ErrorInfo`" + ` detail (domain ` + "`sluice`" + `) of a gRPC status. This is
every code, with the HTTP statuses and gRPC codes it is answered with (a
code raised by several components can be answered differently by each: the
model server answers ` + "`body_too_large`" + ` 400 as Triton does, the gateway and the
feature server 413). A dash is a status the answer passes on from elsewhere
(an upstream's answer), one chosen where the answer is written rather than
where the code is raised, or a code not sent over that protocol. The pages of
each server ([model server](model-server.md#errors),
[feature store](feature-store.md), [gateway](gateway-config.md)) say when
each of theirs is raised.

| reason | HTTP | gRPC | meaning |
|---|---|---|---|
`)
	for _, c := range Codes {
		h := make([]string, len(c.HTTP))
		for i, s := range c.HTTP {
			h[i] = strconv.Itoa(s)
		}
		g := make([]string, len(c.GRPC))
		for i, s := range c.GRPC {
			g[i] = s.String()
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", c.Reason, orDash(strings.Join(h, ", ")), orDash(strings.Join(g, ", ")), strings.ReplaceAll(c.Meaning, "|", `\|`))
	}
	return b.Bytes()
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// TestErrorsPageAgrees: docs/errors.md is Codes rendered.
func TestErrorsPageAgrees(t *testing.T) {
	path := filepath.Join(root, "docs", "errors.md")
	want := renderErrorsPage()
	if *update {
		require.NoError(t, os.WriteFile(path, want, 0o600))
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "docs/errors.md is stale: go test ./internal/apierr -run TestErrorsPageAgrees -update")
}

var (
	codeSpan  = regexp.MustCompile("`([a-z][a-z0-9_]*)`")
	statusNum = regexp.MustCompile(`\b[45]\d\d\b`)
	grpcName  = regexp.MustCompile(`\b[A-Z][A-Za-z]+\b`)
)

// TestServerPagesAgree: the hand-written error tables of the servers'
// pages name only codes of Codes, with statuses Codes lists for them.
func TestServerPagesAgree(t *testing.T) {
	idx := codeIndex(t)
	grpcByName := map[string]codes.Code{}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		grpcByName[c.String()] = c
	}
	check := func(file string, line int, reasons []string, statuses, grpcs string) {
		t.Helper()
		var http []int
		var gs []codes.Code
		for _, r := range reasons {
			c, ok := idx[r]
			require.True(t, ok, "%s:%d: %q is not a row of apierr.Codes", file, line, r)
			http = append(http, c.HTTP...)
			gs = append(gs, c.GRPC...)
		}
		for _, s := range statusNum.FindAllString(statuses, -1) {
			n, _ := strconv.Atoi(s)
			require.Contains(t, http, n, "%s:%d: %v answered %d; apierr.Codes lists %v", file, line, reasons, n, http)
		}
		for _, g := range grpcName.FindAllString(grpcs, -1) {
			code, ok := grpcByName[g]
			require.True(t, ok, "%s:%d: %q is no gRPC code", file, line, g)
			require.Contains(t, gs, code, "%s:%d: %v sent as %s; apierr.Codes lists %v", file, line, reasons, g, gs)
		}
	}
	rows := 0
	// | reason | HTTP | gRPC | meaning | (model-server.md)
	b, err := os.ReadFile(filepath.Join(root, "docs", "model-server.md"))
	require.NoError(t, err)
	for i, l := range strings.Split(string(b), "\n") {
		cells := strings.Split(strings.Trim(l, "| "), " | ")
		if !strings.HasPrefix(l, "| `") || len(cells) < 4 || !statusNum.MatchString(cells[1]) {
			continue
		}
		var rs []string
		for _, m := range codeSpan.FindAllStringSubmatch(cells[0], -1) {
			rs = append(rs, m[1])
		}
		check("docs/model-server.md", i+1, rs, cells[1], cells[2])
		rows++
	}
	// | Status | Reason | When | (feature-store.md, gateway-config.md)
	for _, f := range []string{"feature-store.md", "gateway-config.md"} {
		b, err := os.ReadFile(filepath.Join(root, "docs", f))
		require.NoError(t, err)
		for i, l := range strings.Split(string(b), "\n") {
			cells := strings.Split(strings.Trim(l, "| "), " | ")
			if len(cells) < 3 || !statusNum.MatchString(cells[0]) || len(cells[0]) > 9 || !strings.HasPrefix(cells[1], "`") {
				continue
			}
			var rs []string
			for _, m := range codeSpan.FindAllStringSubmatch(cells[1], -1) {
				rs = append(rs, m[1])
			}
			check("docs/"+f, i+1, rs, cells[0], "")
			rows++
		}
	}
	require.Greater(t, rows, 40, "the pages' error tables were not found")
}
