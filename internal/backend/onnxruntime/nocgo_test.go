//go:build !cgo

package onnxruntime

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func closeSharedBackend() error { return nil }

func TestNewWithoutCgo(t *testing.T) {
	b, err := New(Options{}, nil)
	require.Nil(t, b)
	require.True(t, errors.Is(err, ErrNotBuiltIn))
	require.EqualError(t, err, "onnxruntime backend not built in: this binary was built with CGO_ENABLED=0")
}
