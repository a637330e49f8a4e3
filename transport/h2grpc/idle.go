package h2grpc

// Idle connections and stalled streams. A connection with no stream for
// Options.IdleTimeout drains (GOAWAY, as grpc-go's MaxConnectionIdle) and
// closes; a stream whose request message has not arrived
// Options.StallTimeout after its headers is answered DEADLINE_EXCEEDED and
// reset (NO_ERROR, as any answer to a request still coming). Both hold what
// a client may otherwise keep for as long as it likes: a connection, a
// stream slot, request bytes.
//
// One timer per connection ticks at a quarter of the shorter timeout, and
// streams remember the tick they began waiting at, so that a call costs no
// clock reading: a timeout is acted on between once and 1.5 times its
// length after it began.

import (
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// StallMessage is the status message of a stalled stream's answer
// (DEADLINE_EXCEEDED).
const StallMessage = "h2grpc: no request message within the stall timeout"

var errStalled = status.Error(codes.DeadlineExceeded, StallMessage)

// watch is a connection's idle and stall bookkeeping, under its mu.
type watch struct {
	t     *time.Timer
	every time.Duration
	// idleTicks and stallTicks are the ticks that make each timeout.
	idleTicks, stallTicks uint32
	tick                  uint32 // ticks so far
	opened, seen          uint64 // streams opened ever, and at the last tick
	quiet                 uint32 // ticks in a row with no stream
}

// ticks is how many ticks of every make at least d, counted from a
// stream that may have begun just before a tick.
func ticks(d, every time.Duration) uint32 { return uint32((d+every-1)/every) + 1 }

// startWatch starts the connection's timer.
func (c *conn) startWatch() {
	o := &c.s.o
	every := max(min(o.IdleTimeout, o.StallTimeout)/4, time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &c.watch
	w.every = every
	w.idleTicks, w.stallTicks = ticks(o.IdleTimeout, every), ticks(o.StallTimeout, every)
	w.t = time.AfterFunc(every, c.onTick)
}

func (c *conn) stopWatch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watch.t != nil {
		c.watch.t.Stop()
	}
}

// openedLocked counts a stream that opens: st waits for its request from
// now on, unless it is a bidirectional call (startBidi says when it
// waits: its inbox comes later).
func (c *conn) openedLocked(st *stream, bidi bool) {
	c.watch.opened++
	st.waiting, st.waitTick = !bidi, c.watch.tick
}

// onTick answers stalled streams and drains a connection idle for long
// enough.
func (c *conn) onTick() {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	w := &c.watch
	w.tick++
	stalled := false
	for _, st := range c.live {
		if st.waiting && w.tick-st.waitTick >= w.stallTicks {
			c.stallLocked(st)
			stalled = true
		}
	}
	if stalled {
		c.flushLocked()
	}
	idle := false
	if len(c.live) > 0 || w.opened != w.seen {
		w.quiet, w.seen = 0, w.opened
	} else if w.quiet++; w.quiet >= w.idleTicks && !c.draining {
		idle = true
	}
	w.t.Reset(w.every)
	c.mu.Unlock()
	if idle {
		c.s.o.Log.Debug("closing an idle gRPC connection", "remote", c.nc.RemoteAddr().String())
		c.drain(0)
	}
}

// stallLocked answers st, whose request message has not come.
func (c *conn) stallLocked(st *stream) {
	st.waiting = false
	if st.in != nil {
		// A bidirectional call: recv fails with the status, and so does
		// the call; its method's goroutine answers and resets it.
		c.failInboxLocked(st, errStalled)
		st.in.cond.Broadcast()
		return
	}
	// A call the reader still receives: answered here, with the fields
	// the reader does not write (no grpc-accept-encoding), and its
	// answer dropped should the request complete meanwhile. The reader
	// releases its request bytes (releaseStalled).
	if !c.dead && !st.reset {
		block := append(append([]byte(nil), respHeaders...), trailers(codes.DeadlineExceeded, StallMessage)...)
		c.out = appendHeaders(c.out, st.id, block, true)
		c.out = appendRSTStream(c.out, st.id, http2.ErrCodeNo)
		c.answers++
		c.resets.add(st.id, int(c.s.o.MaxConcurrentStreams))
	}
	st.reset = true
	c.cancelLocked(st, errStalled)
	c.endLocked(st)
	c.stalled = append(c.stalled, st)
	c.stallDue.Store(true)
}

// releaseStalled releases the request bytes of the streams answered as
// stalled that no worker owns. The reader calls it.
func (c *conn) releaseStalled() {
	c.stallDue.Store(false)
	c.mu.Lock()
	sts := c.stalled
	c.stalled = nil
	c.mu.Unlock()
	for _, st := range sts {
		if !st.dispatched {
			c.release(st)
		}
	}
}
