package python

import "syscall"

// procAttr puts a worker in a process group of its own, so that a signal
// meant for the server's group (Ctrl-C in a terminal) does not reach it
// and unloading can signal the worker's children too, and has the kernel
// kill it when the server dies.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// socketType creates the worker socket close-on-exec, so that workers
// started at the same time do not inherit each other's sockets.
const socketType = syscall.SOCK_STREAM | syscall.SOCK_CLOEXEC
