package h2grpc

// Streaming calls: server-streaming and bidirectional methods on goroutines
// of their own, their contexts, and the output half they share.

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errStreamReset is the cause of a streaming call's context ending because
// the client reset the stream.
var errStreamReset = status.Error(codes.Canceled, "h2grpc: the client reset the stream")

// streamContext makes the context of st's method: it ends with the
// connection, at st's deadline, or when cancelLocked is called (reset,
// drain, a request that cannot be read). A cause that came before the
// method ran ends it at once, as does a drain already past its last
// GOAWAY. Waiters of st (send on the connection's cond, recv on the
// inbox's) are woken when it ends. done releases it.
func (c *conn) streamContext(st *stream) (ctx context.Context, done func()) {
	parent, stopDeadline := c.ctx, context.CancelFunc(func() {})
	if !st.deadline.IsZero() {
		parent, stopDeadline = context.WithDeadline(c.ctx, st.deadline)
	}
	ctx, cancel := context.WithCancelCause(parent)
	c.mu.Lock()
	st.cancel = cancel
	cause := st.cause
	if cause == nil && c.phase2 {
		cause = ErrDraining
	}
	c.mu.Unlock()
	if cause != nil {
		cancel(cause)
	}
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		if st.in != nil {
			st.in.cond.Broadcast()
		}
		c.mu.Unlock()
	})
	return ctx, func() {
		stop()
		cancel(nil)
		stopDeadline()
	}
}

// cancelLocked ends st's method's context with cause, or has it end as
// soon as the method runs.
func (c *conn) cancelLocked(st *stream, cause error) {
	switch {
	case st.cancel != nil:
		st.cancel(cause)
	case st.cause == nil:
		st.cause = cause
	}
}

// resetLocked marks st reset: its answer is dropped, and a streaming
// call's context ends (and a send waiting for room gives up).
func (c *conn) resetLocked(st *stream) {
	st.reset = true
	c.cancelLocked(st, errStreamReset)
	c.cond.Broadcast()
}

// drainStreamsLocked ends the context of every streaming call running on
// the connection: a drain does not wait for streams that may last as long
// as the connection. Those whose methods have not started yet see
// phase2 when they do.
func (c *conn) drainStreamsLocked() {
	for _, st := range c.live {
		if st.cancel != nil {
			st.cancel(ErrDraining)
		}
	}
}

// streamErrLocked is why st can no longer send or receive, or nil.
func (c *conn) streamErrLocked(ctx context.Context, st *stream) error {
	switch {
	case st.reset:
		return errStreamReset
	case c.dead:
		return status.Error(codes.Unavailable, "h2grpc: the connection closed")
	case ctx.Err() != nil:
		if cause := context.Cause(ctx); errors.Is(cause, ErrDraining) || errors.Is(cause, errStreamReset) {
			return cause
		}
		return status.FromContextError(ctx.Err()).Err()
	}
	return nil
}

// runStream runs a server-streaming call.
func (c *conn) runStream(st *stream) {
	ctx, done := c.streamContext(st)
	req := *st.msg
	sent := false
	var frame []byte
	err := st.streaming(ctx, req[5:], func(msg []byte) error {
		if !sent {
			sent = true
			c.release(st) // the request is read by now
		}
		frame = binary.BigEndian.AppendUint32(append(frame[:0], 0), uint32(len(msg)))
		frame = append(frame, msg...)
		return c.send(ctx, st, frame)
	})
	done()
	st.started()
	if !sent {
		c.release(st)
	}
	c.endStreaming(st, err)
}

// runBidi runs a client- or bidirectional-streaming call.
func (c *conn) runBidi(st *stream) {
	ctx, done := c.streamContext(st)
	ctx = context.WithValue(ctx, ackerKey{}, Acker(func() <-chan bool { return c.ack(st) }))
	var frame []byte
	err := st.bidi(ctx, func() ([]byte, error) {
		return c.recv(ctx, st)
	}, func(msg []byte) error {
		frame = binary.BigEndian.AppendUint32(append(frame[:0], 0), uint32(len(msg)))
		frame = append(frame, msg...)
		return c.send(ctx, st, frame)
	})
	done()
	st.started()
	c.endStreaming(st, err)
}

// endStreaming ends a streaming call whose method returned err: with its
// status in trailers, after what it sent.
func (c *conn) endStreaming(st *stream, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.in != nil {
		if st.in.err != nil {
			err = st.in.err // the request failed: that is the call's status
		}
		c.closeInboxLocked(st)
	}
	code, msg := codes.OK, ""
	if err != nil {
		code, msg = statusOf(err)
	}
	switch {
	case c.dead || st.reset:
		c.blocked = slices.DeleteFunc(c.blocked, func(b *stream) bool { return b == st })
		c.endLocked(st)
	case !st.headerSent:
		c.answers++
		c.out = appendHeaders(c.out, st.id, trailersOnlyFor(st, code, msg), true)
		c.endedLocked(st)
	default:
		c.endStreamLocked(st, trailers(code, msg))
	}
	c.flushLocked()
}

// send writes one message of a streaming call, within the peer's windows;
// what they do not allow waits, at most MaxOutput of it.
func (c *conn) send(ctx context.Context, st *stream, frame []byte) error {
	st.started()
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.streamErrLocked(ctx, st) == nil && (len(c.out) > c.s.o.MaxOutput || len(st.pending) > c.s.o.MaxOutput) {
		c.cond.Wait()
	}
	if err := c.streamErrLocked(ctx, st); err != nil {
		return err
	}
	if !st.headerSent {
		st.headerSent = true
		c.out = appendHeaders(c.out, st.id, respHeadersFor(st), false)
	}
	c.answers++
	c.queueDataLocked(st, frame)
	// A streaming method sends as it has something to say, not as one of
	// a batch's answers that become ready together: yielding for others
	// to join the write only put its writer at the back of the
	// scheduler's queue, behind every busy goroutine (under a bucket
	// flood, 16 % of all the time goroutines waited to run, and the
	// quota probe's answer waited with them).
	c.flushWholeLocked()
	return nil
}
