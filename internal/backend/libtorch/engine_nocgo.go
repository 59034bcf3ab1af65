//go:build !cgo

package libtorch

// openLibrary fails: without cgo the server cannot call libtorch.
func openLibrary(string) (engine, error) { return nil, ErrNotBuiltIn }
