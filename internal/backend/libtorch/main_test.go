package libtorch

import (
	"os"
	"sync"
	"testing"
)

// generated holds the models testdata/make_models.py writes, once per run.
var generated struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if generated.dir != "" {
		_ = os.RemoveAll(generated.dir)
	}
	os.Exit(code)
}
