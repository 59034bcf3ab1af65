package modelrepo

import (
	"path/filepath"
	"strings"
	"testing"
)

func FuzzParseManifest(f *testing.F) {
	f.Add([]byte("b9fbf76277a38d0d9769ebf713c2658f320434d93d34229c16f3d209d4e66a0a  model.onnx\n"))
	f.Add([]byte("b9fbf76277a38d0d9769ebf713c2658f320434d93d34229c16f3d209d4e66a0a *sub/weights.bin\r\n\n"))
	f.Add([]byte("zz  ../../etc/passwd\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, ps := parseManifest("SHA256SUMS", data)
		lines := strings.Count(string(data), "\n") + 1
		if len(entries)+len(ps) > lines {
			t.Fatalf("%d entries and %d problems from %d lines", len(entries), len(ps), lines)
		}
		for _, e := range entries {
			if !filepath.IsLocal(filepath.FromSlash(e.File)) {
				t.Fatalf("entry %q escapes the version folder", e.File)
			}
			if e.Line < 1 || e.Line > lines {
				t.Fatalf("entry on line %d of %d", e.Line, lines)
			}
		}
		for _, p := range ps {
			if p.Pos.Line < 1 || p.Pos.Line > lines {
				t.Fatalf("problem on line %d of %d", p.Pos.Line, lines)
			}
		}
	})
}

func FuzzParseProvenance(f *testing.F) {
	f.Add([]byte(`{"version": "2.1.0-a1b2c3d", "git_commit": "a1b2c3d4"}`))
	f.Add([]byte("{\n  \"version\": 2\n}"))
	f.Add([]byte(`{"version": "x"} {}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := parseProvenance("model_config.json", data)
		if err == nil {
			return
		}
		if !strings.HasPrefix(err.Error(), "model_config.json:") {
			t.Fatalf("error %q does not name the file", err)
		}
	})
}
