package odata

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// stallListener wraps accepted connections so that a write that makes no
// progress for StallTimeout fails, and so Shutdown can close them.
type stallListener struct {
	net.Listener
	s *Server
}

func (l *stallListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	sc := &stallConn{Conn: c, s: l.s, state: fasthttp.StateNew, since: time.Now()}
	l.s.connsMu.Lock()
	l.s.conns[sc] = struct{}{}
	l.s.connsMu.Unlock()
	return sc, nil
}

type stallConn struct {
	net.Conn
	s     *Server
	once  sync.Once
	clock writeClock // for the data slot of the response being written

	// reads counts reads of one byte or more, so that a drain can tell a
	// connection fasthttp calls idle from one it is reading a request from.
	reads atomic.Int64
	// The state fasthttp last reported, when, and reads at that moment.
	stateMu sync.Mutex
	state   fasthttp.ConnState
	since   time.Time
	readsAt int64
}

func (c *stallConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.reads.Add(1)
	}
	return n, err
}

func (c *stallConn) Write(p []byte) (int, error) {
	// fasthttp sets no write deadline of its own (WriteTimeout is 0): the
	// deadline here restarts with every write, so it bounds a stall, not
	// the length of a response.
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.s.opts.StallTimeout))
	c.clock.start()
	defer c.clock.stop()
	return c.Conn.Write(p)
}

func (c *stallConn) Close() error {
	c.once.Do(func() {
		c.s.connsMu.Lock()
		delete(c.s.conns, c)
		c.s.connsMu.Unlock()
	})
	return c.Conn.Close()
}
