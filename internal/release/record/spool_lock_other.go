//go:build !unix

package record

import "os"

// lockDir opens path; this platform has no advisory lock, so two
// processes sharing a spool directory are not detected.
func lockDir(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}

// unlockDir closes the lock file.
func unlockDir(f *os.File) error { return f.Close() }
