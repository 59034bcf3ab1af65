//go:build !linux

package python

import "syscall"

// procAttr puts a worker in a process group of its own, so that a signal
// meant for the server's group (Ctrl-C in a terminal) does not reach it
// and unloading can signal the worker's children too. A worker notices
// that the server died when its socket closes.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// socketType is a plain stream socket; Go's fork marks descriptors
// close-on-exec under syscall.ForkLock anyway.
const socketType = syscall.SOCK_STREAM
