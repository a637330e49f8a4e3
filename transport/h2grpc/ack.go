package h2grpc

import (
	"context"
	"encoding/binary"
)

// An Acker asks the peer of a streaming call's connection to acknowledge
// what the call has sent: the channel it returns gets true once an HTTP/2
// PING written behind everything the call sent so far is answered (the
// peer's HTTP/2 layer has read all of it, in order), or false if the
// connection ends first, or if some of what the call sent still waits for
// flow-control window (a PING would pass it). A connection has at most one such PING out:
// asks made while one is out are answered by the next, which goes when it
// returns. The quota service uses it to know an Envoy has an assignment
// without waiting for the Envoy's next report.
type Acker func() <-chan bool

type ackerKey struct{}

// AckerOf is the Acker of the connection of the streaming call whose
// context is ctx (ok is false for a context that is not one).
func AckerOf(ctx context.Context) (Acker, bool) {
	a, ok := ctx.Value(ackerKey{}).(Acker)
	return a, ok
}

// ackPrefix starts the payload of the PINGs an Acker writes (the rest is
// their number), telling their answers from a drain's.
var ackPrefix = [2]byte{'a', 'k'}

type ackWaiter struct {
	seq uint64
	ch  chan bool
}

// acks is a connection's Acker state, under conn.mu.
type acks struct {
	seq     uint64 // the last PING written
	out     bool   // it is not answered yet
	waiters []ackWaiter
}

// ack is st's Acker.
func (c *conn) ack(st *stream) <-chan bool {
	ch := make(chan bool, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead || len(st.pending) > 0 {
		ch <- false
		return ch
	}
	a := &c.acks
	if a.out {
		// The PING out was written before what the caller sent: the next
		// one answers it.
		a.waiters = append(a.waiters, ackWaiter{seq: a.seq + 1, ch: ch})
		return ch
	}
	c.pingLocked()
	a.waiters = append(a.waiters, ackWaiter{seq: a.seq, ch: ch})
	return ch
}

// pingLocked writes the connection's next Acker PING.
func (c *conn) pingLocked() {
	a := &c.acks
	a.seq++
	a.out = true
	var data [8]byte
	binary.BigEndian.PutUint64(data[:], a.seq&(1<<48-1)|uint64(ackPrefix[0])<<56|uint64(ackPrefix[1])<<48)
	c.out = appendPingFrame(c.out, data, false)
	c.flushLocked()
}

// onAck takes the answer to an Acker PING (false: the PING was not one).
func (c *conn) onAck(data [8]byte) bool {
	if data[0] != ackPrefix[0] || data[1] != ackPrefix[1] {
		return false
	}
	seq := binary.BigEndian.Uint64(data[:]) & (1<<48 - 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	a := &c.acks
	if seq != a.seq&(1<<48-1) {
		return true // not the one out: a peer that answers twice
	}
	a.out = false
	kept := a.waiters[:0]
	for _, w := range a.waiters {
		if w.seq <= a.seq {
			w.ch <- true
		} else {
			kept = append(kept, w)
		}
	}
	a.waiters = kept
	if len(kept) > 0 && !c.dead {
		c.pingLocked()
	}
	return true
}

// failAcksLocked answers every waiting ask false: the connection ended.
func (c *conn) failAcksLocked() {
	for _, w := range c.acks.waiters {
		w.ch <- false
	}
	c.acks.waiters = nil
}
