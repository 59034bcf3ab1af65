package libtorch

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if generated.dir != "" {
		_ = os.RemoveAll(generated.dir)
	}
	os.Exit(code)
}
