package registry

import (
	"os"
	"testing"
	"testing/fstest"
)

func TestHangRepro(t *testing.T) {
	data, _ := os.ReadFile("/tmp/hang.yaml")
	fsys := fstest.MapFS{ConfigFile: {Data: []byte("project: p\n")}, "d.yaml": {Data: data}}
	_, err := load(t.Context(), fsys, "/repo")
	t.Log(err)
}
