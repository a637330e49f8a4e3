package transport

import (
	"net"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/netx"
)

// drainListener counts what its connections read, so that a drain can
// tell a connection net/http calls idle from one it is reading a request
// from.
type drainListener struct{ net.Listener }

func (l *drainListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &drainConn{Conn: c}, nil
}

// drainConn is a connection that counts its reads of one byte or more.
type drainConn struct {
	net.Conn
	reads atomic.Int64
}

func (c *drainConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.reads.Add(1)
	}
	return n, err
}

// readsOf is c's read count (0 for a connection not from a drainListener).
func readsOf(c net.Conn) int64 {
	if dc, ok := c.(*drainConn); ok {
		return dc.reads.Load()
	}
	return 0
}

// holdsRequest says whether c, in state s, may hold a request a drain
// must not drop: bytes were read since it took the state (net/http calls
// a connection active only once a whole header is read), or bytes wait
// unread in its socket.
func holdsRequest(c net.Conn, s connState) bool {
	dc, ok := c.(*drainConn)
	if !ok {
		return false
	}
	if dc.reads.Load() != s.reads {
		return true
	}
	return netx.Pending(dc.Conn)
}
