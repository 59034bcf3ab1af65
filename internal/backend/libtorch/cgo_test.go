//go:build cgo

package libtorch

// cgoBuild: the test binary can open libraries.
const cgoBuild = true
