package odata

import (
	"net"
	"syscall"
	"time"
)

// watchPeerClose reports on gone when the client closes its end of c while
// no request is being read from it (a request waiting for its turn): the
// socket turns readable, and a peek that reads nothing is the peer's FIN.
// Bytes a client pipelines behind its request are peeked, never consumed,
// and end the watch without a report. stop ends the watch and returns once
// its goroutine has; the read deadline it leaves behind is replaced by
// fasthttp's own before it reads the next request.
func watchPeerClose(c net.Conn) (gone <-chan struct{}, stop func()) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, func() {}
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, func() {}
	}
	// fasthttp's ReadTimeout deadline of this request would end the watch
	// early; the wait has its own bound.
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return nil, func() {}
	}
	ch := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [1]byte
		_ = raw.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			switch {
			case err == syscall.EAGAIN || err == syscall.EINTR:
				return false // nothing yet: wait until readable
			case err != nil || n == 0:
				close(ch) // reset, or end of stream
			}
			return true
		})
	}()
	return ch, func() {
		_ = c.SetReadDeadline(time.Now())
		<-done
	}
}
