package transport

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// drainServer is an HTTP/1.1 server that stops without dropping a request a
// client has already sent. http.Server.Shutdown closes every idle
// keep-alive connection at once, and a client that wrote its next request
// just then loses it (a reset, or EOF with no answer), which it cannot tell
// from a request the server acted on. Instead, as Envoy's drain does:
//
//  1. the listener closes, so no connection is added;
//  2. every answer carries "Connection: close", so a busy client learns
//     from its last answer to send nothing more on that connection;
//  3. a connection idle for drainIdle (none of its requests in flight) is
//     closed: a client that has sent nothing for that long is not in the
//     middle of sending. Idle as net/http sees it is not enough: under CPU
//     load a request can sit unread in the socket, or be read in part, for
//     longer than that while net/http still calls the connection idle. So
//     one with bytes read since it turned idle, or with bytes waiting in
//     the socket, is left to be answered (drainconn.go);
//  4. once none is left, or the grace ends, Shutdown finishes the rest.
type drainServer struct {
	*http.Server
	draining atomic.Bool

	mu    sync.Mutex
	conns map[net.Conn]connState
	ln    net.Listener
}

type connState struct {
	state http.ConnState
	since time.Time
	reads int64 // the connection's reads when it took this state
}

// drainIdle is how long a connection must have been idle before a drain
// closes it: far longer than a client in a request loop waits between an
// answer and its next request, also on a machine whose cores are busy
// (100 ms lost a request now and then under load: the client's goroutine
// waited that long for a core, then wrote as the connection closed), and
// short enough not to hold a shutdown up (a tenth of the drain's grace).
const drainIdle = time.Second

func newDrainServer(s *http.Server) *drainServer {
	d := &drainServer{Server: s, conns: map[net.Conn]connState{}}
	h := s.Handler
	s.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.draining.Load() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
	s.ConnState = d.track
	return d
}

func (d *drainServer) track(c net.Conn, st http.ConnState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch st {
	case http.StateClosed, http.StateHijacked:
		delete(d.conns, c)
	default:
		d.conns[c] = connState{state: st, since: time.Now(), reads: readsOf(c)}
	}
}

// Serve serves ln until drain; a listener closed by drain ends it with
// http.ErrServerClosed, as Shutdown would.
func (d *drainServer) Serve(ln net.Listener) error {
	ln = &drainListener{Listener: ln}
	d.mu.Lock()
	d.ln = ln
	d.mu.Unlock()
	err := d.Server.Serve(ln)
	if d.draining.Load() && errors.Is(err, net.ErrClosed) {
		err = http.ErrServerClosed
	}
	return err
}

// drain stops the server as the type's comment says, within ctx.
func (d *drainServer) drain(ctx context.Context) error {
	d.draining.Store(true)
	d.mu.Lock()
	if d.ln != nil {
		_ = d.ln.Close()
	}
	d.mu.Unlock()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for d.closeIdle(time.Now()) > 0 {
		select {
		case <-ctx.Done():
			return d.Server.Shutdown(ctx)
		case <-t.C:
		}
	}
	return d.Server.Shutdown(ctx)
}

// closeIdle closes the connections idle (or new and silent) for drainIdle
// and returns how many connections are still open.
func (d *drainServer) closeIdle(now time.Time) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	for c, s := range d.conns {
		if (s.state == http.StateIdle || s.state == http.StateNew) && now.Sub(s.since) >= drainIdle && !holdsRequest(c, s) {
			_ = c.Close()
			delete(d.conns, c) // its StateClosed follows
		}
	}
	return len(d.conns)
}
