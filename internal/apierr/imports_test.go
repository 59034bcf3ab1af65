package apierr

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestImportsStayOnTheGroundFloor keeps the package a leaf every edge,
// client and the tensor package can import: of Sluice it may import only
// scrub and jsonenc, which import nothing of Sluice themselves.
func TestImportsStayOnTheGroundFloor(t *testing.T) {
	const module = "github.com/sluice-ml/sluice/"
	allowed := map[string]bool{
		module + "internal/scrub":   true,
		module + "internal/jsonenc": true,
	}
	check := func(dir string, allowed map[string]bool) {
		t.Helper()
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		require.NotEmpty(t, files, dir)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			parsed, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
			require.NoError(t, err)
			for _, imp := range parsed.Imports {
				path, err := strconv.Unquote(imp.Path.Value)
				require.NoError(t, err)
				if strings.HasPrefix(path, module) {
					require.True(t, allowed[path], "%s imports %s", f, path)
				}
			}
		}
	}
	check(".", allowed)
	for _, dir := range []string{"../scrub", "../jsonenc"} {
		check(dir, nil)
	}
}
