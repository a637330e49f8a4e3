package h2grpc

// Drain: GOAWAY, graceful stops in two phases, and closing once idle.

import (
	"errors"
	"io"
	"time"

	"golang.org/x/net/http2"
)

// goAway sends a last GOAWAY before the connection closes on an error.
func (c *conn) goAway(code http2.ErrCode, msg string) {
	c.sentGoAway = true
	c.mu.Lock()
	c.out = appendGoAway(c.out, c.lastID, code, []byte(msg))
	// The connection closes next: the GOAWAY must be written first.
	c.flushWaitLocked()
	c.mu.Unlock()
}

// linger lets the peer read the GOAWAY of a connection error: closing a
// socket with unread input resets it, and the peer may lose what we wrote.
// Our side is shut, and what the peer still sends is read and dropped for
// a second at most.
func (c *conn) linger() {
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if !ok {
		return
	}
	// Answers still coming would write to a shut socket, fail, and close
	// it with unread input after all: they are dropped instead.
	c.mu.Lock()
	c.lingering = true
	writing := c.writing
	c.mu.Unlock()
	if writing || cw.CloseWrite() != nil {
		return
	}
	if c.nc.SetReadDeadline(time.Now().Add(time.Second)) == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(c.nc, 1<<20))
	}
}

// drain sends GOAWAY and closes the connection once its open calls are
// answered, or after grace (0: no limit) at the latest.
func (c *conn) drain(grace time.Duration) {
	c.mu.Lock()
	if c.draining || c.dead {
		c.mu.Unlock()
		return
	}
	if !c.started {
		// Our SETTINGS must be the first frame; a connection that has
		// not sent its preface yet has no call to finish either.
		c.mu.Unlock()
		c.close(errors.New("stopping before the connection's preface"))
		return
	}
	c.draining = true
	// The last stream we may have seen: streams the reader has not read
	// yet are above it and the client retries them elsewhere.
	c.out = appendGoAway(c.out, maxStreamID, http2.ErrCodeNo, nil)
	// The connection is not closed (checked under mu), so its own count
	// in connWG is still held: adding here cannot race a finished Wait.
	c.s.connWG.Add(1)
	ack := make(chan struct{})
	c.drainAck = ack
	c.out = appendPingFrame(c.out, drainPing, false)
	c.flushLocked()
	c.mu.Unlock()
	go func() {
		defer c.s.connWG.Done()
		// The client answers our PING after everything it sent before it
		// read the GOAWAY: once the reader has the answer, the streams
		// it has seen are all the client will open (grpc-go's two-phase
		// drain). A client that never answers gets a second to do so.
		t := time.NewTimer(time.Second)
		select {
		case <-ack:
		case <-t.C:
		case <-c.closed:
		}
		t.Stop()
		c.mu.Lock()
		if !c.dead {
			c.phase2 = true
			c.out = appendGoAway(c.out, c.lastID, http2.ErrCodeNo, nil)
			c.drainStreamsLocked()
			c.flushLocked()
			c.closeIfIdleLocked()
		}
		c.mu.Unlock()
		if grace > 0 {
			select {
			case <-c.closed:
			case <-time.After(grace):
				c.close(errors.New("connection age grace elapsed"))
			}
		}
	}()
}

// drainPing is the payload of the PING that ends a drain's first phase.
var drainPing = [8]byte{'s', 'l', 'u', 'i', 'c', 'e', 'g', 'o'}

const maxStreamID = 1<<31 - 1

// closeIfIdleLocked closes a draining connection with nothing left to
// answer or write.
func (c *conn) closeIfIdleLocked() {
	if c.phase2 && len(c.live) == 0 && len(c.out) == 0 && !c.writing && !c.dead {
		c.writers.Add(1)
		go func() {
			defer c.writers.Done()
			c.close(nil)
		}()
	}
}
