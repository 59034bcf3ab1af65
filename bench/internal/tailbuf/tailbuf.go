// Package tailbuf keeps the end of a process's output for the benchmark
// harnesses' error messages.
package tailbuf

import (
	"bytes"
	"sync"
)

// Buffer keeps the last Max bytes written to it; safe for concurrent use.
type Buffer struct {
	Max int

	mu  sync.Mutex // protects buf
	buf bytes.Buffer
}

// Write appends p, dropping the oldest bytes beyond Max.
func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if over := t.buf.Len() - t.Max; over > 0 {
		t.buf.Next(over)
	}
	return len(p), nil
}

// String returns what is kept.
func (t *Buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}
