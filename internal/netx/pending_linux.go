package netx

import (
	"net"
	"syscall"
)

// Pending says whether bytes wait to be read in c's socket: a peek that
// neither waits, nor consumes them, nor takes the lock a server's blocked
// read holds. A drain asks it before closing an idle keep-alive
// connection, so that a request a client just wrote is not dropped.
func Pending(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var waiting bool
	_ = raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		waiting = err == nil && n > 0
	})
	return waiting
}
