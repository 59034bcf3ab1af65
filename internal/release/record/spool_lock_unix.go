//go:build unix

package record

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockDir takes an exclusive lock on path (created if missing), so that
// two processes never share a spool.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errors.New("in use by another process (give each replica its own spool directory)")
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// unlockDir releases the lock (closing the file drops it).
func unlockDir(f *os.File) error { return f.Close() }
