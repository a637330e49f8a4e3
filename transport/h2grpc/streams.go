package h2grpc

import (
	"fmt"

	"golang.org/x/net/http2"
)

// Stream states as RFC 9113 section 5.1 has the reader judge the frames
// of a stream it no longer serves. A stream the peer ended (END_STREAM)
// or reset is closed for its DATA: more of it is a STREAM_CLOSED error
// (treated as a connection error, which section 5.4.1 allows for any
// stream error). A stream we reset may still see the DATA the peer sent
// before it read our RST_STREAM: that is dropped. Which streams we reset
// is remembered by ourResets; the others need no memory.

// ourResets is the set of the streams this connection reset while their
// request was still coming, newest last; under the connection's mu (a
// bidirectional call's method ends its stream early from its own
// goroutine). It holds as many as
// MaxConcurrentStreams: a peer that keeps to that limit counts a stream we
// reset as open until it reads our RST_STREAM, so the DATA it may still
// send belongs to one of the last MaxConcurrentStreams streams we reset.
// Allocated on the first reset.
type ourResets struct {
	ids  map[uint32]struct{}
	ring []uint32
	next int
}

func (r *ourResets) add(id uint32, size int) {
	if r.ids == nil {
		r.ids = make(map[uint32]struct{}, min(size, 64))
		r.ring = make([]uint32, 0, min(size, 64))
	}
	if _, ok := r.ids[id]; ok {
		return
	}
	if len(r.ring) < size {
		r.ring = append(r.ring, id)
	} else {
		delete(r.ids, r.ring[r.next])
		r.ring[r.next] = id
		r.next = (r.next + 1) % size
	}
	r.ids[id] = struct{}{}
}

func (r *ourResets) has(id uint32) bool {
	_, ok := r.ids[id]
	return ok
}

// forget is the peer resetting a stream we reset: what it sends on it
// afterwards is no longer in flight, but an error.
func (r *ourResets) forget(id uint32) {
	delete(r.ids, id) // its ring slot is reused in turn
}

// idle reports whether id names a stream the peer has not opened: we open
// none (even ids), and the peer's are opened in order.
func (c *conn) idle(id uint32) bool { return id != 0 && (id%2 == 0 || id > c.lastID) }

// resetStream tells the peer to stop sending on a stream whose request is
// still coming, and remembers that what it sent meanwhile is dropped.
func (c *conn) resetStream(id uint32, code http2.ErrCode) {
	c.mu.Lock()
	c.resets.add(id, int(c.s.o.MaxConcurrentStreams))
	c.out = appendRSTStream(c.out, id, code)
	c.flushLocked()
	c.mu.Unlock()
}

// dataNotServed judges DATA for a stream that takes none: on one we reset
// it is dropped; on one the peer ended or reset, a STREAM_CLOSED error.
func (c *conn) dataNotServed(st *stream, id uint32) error {
	c.mu.Lock()
	ours := c.resets.has(id)
	c.mu.Unlock()
	if ours || st != nil && !st.remoteDone {
		return nil
	}
	return connError{http2.ErrCodeStreamClosed, fmt.Sprintf("DATA on stream %d after the client ended or reset it", id)}
}
