package odata

import (
	"net"
	"sync"
	"time"
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
	sc := &stallConn{Conn: c, s: l.s}
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
