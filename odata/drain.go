package odata

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/internal/netx"
)

// drainIdle is how long a keep-alive connection must have been idle before
// a shutdown closes it. fasthttp's own shutdown closes every connection idle
// at that instant, and a client that had just been answered and was writing
// its next request lost it (a reset, or EOF with no answer), which it cannot
// tell from a request the server acted on. A second is far longer than a
// client in a request loop waits between an answer and its next request,
// also when its goroutine waits for a core on a loaded machine, and a tenth
// of the default drain.
const drainIdle = time.Second

// drainTick is how often a drain looks for connections to close.
const drainTick = 10 * time.Millisecond

// handleDraining is the server's handler: while draining, every answer
// carries "Connection: close", so that a busy client learns from its last
// answer to send nothing more on that connection.
func (s *Server) handleDraining(ctx *fasthttp.RequestCtx) {
	if s.draining.Load() {
		ctx.SetConnectionClose()
	}
	s.handleLogged(ctx)
}

// trackState records a connection's state as fasthttp reports it, with the
// time and the connection's read count when it took that state.
func (s *Server) trackState(c net.Conn, st fasthttp.ConnState) {
	sc, ok := c.(*stallConn)
	if !ok {
		return
	}
	sc.stateMu.Lock()
	sc.state, sc.since, sc.readsAt = st, time.Now(), sc.reads.Load()
	sc.stateMu.Unlock()
}

// drain stops the server without dropping a request a client has sent, as
// the rate limit service's HTTP port does (transport/drain.go):
//
//  1. the listener closes, so no connection is added;
//  2. every answer carries "Connection: close" (handleDraining);
//  3. a connection new or idle for drainIdle, with nothing read since and
//     nothing waiting in its socket, is closed: its client is not in the
//     middle of sending. Idle as fasthttp sees it is not enough: under CPU
//     load a request can sit unread in the socket, or be read in part, while
//     fasthttp still calls the connection idle;
//  4. once none is left, or ctx ends, fasthttp's shutdown finishes the rest.
func (s *Server) drain(ctx context.Context) error {
	s.draining.Store(true)
	s.connsMu.Lock()
	ln := s.ln
	s.connsMu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	t := time.NewTicker(drainTick)
	defer t.Stop()
	for s.closeIdle(time.Now()) > 0 {
		select {
		case <-ctx.Done():
			return s.http.ShutdownWithContext(ctx)
		case <-t.C:
		}
	}
	return s.http.ShutdownWithContext(ctx)
}

// closeIdle closes the connections new or idle for drainIdle that hold no
// request, and returns how many are still open.
func (s *Server) closeIdle(now time.Time) int {
	s.connsMu.Lock()
	conns := make([]*stallConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.connsMu.Unlock()
	open := 0
	for _, c := range conns {
		c.stateMu.Lock()
		st, since, readsAt := c.state, c.since, c.readsAt
		c.stateMu.Unlock()
		if (st == fasthttp.StateIdle || st == fasthttp.StateNew) && now.Sub(since) >= drainIdle &&
			c.reads.Load() == readsAt && !netx.Pending(c.Conn) {
			_ = c.Close()
			continue
		}
		open++
	}
	return open
}

// onceCloser closes its listener once: the drain closes it first, and
// fasthttp's shutdown closes it again (an error from the second close
// would read as a failed shutdown).
type onceCloser struct {
	net.Listener
	once sync.Once
	err  error
}

func (l *onceCloser) Close() error {
	l.once.Do(func() { l.err = l.Listener.Close() })
	return l.err
}
