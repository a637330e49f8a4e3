package h2grpc

// The receiving half of client- and bidirectional-streaming calls: the
// reader appends a stream's DATA to its inbox as it arrives and marks the
// messages that are whole; the method's recv takes them in order. The
// stream's window is given back as recv takes messages, so the inbox
// holds at most one window (MaxRecvMsgSize+5 bytes, enough for the
// largest message) besides the message the method holds, and a method
// that reads slowly holds its client back by HTTP/2 flow control; the
// connection's window is given back as bytes arrive, as for every stream,
// so that other calls go on.

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// inbox is what a bidirectional call has received and its method not yet
// released. Its fields are under the connection's mu.
type inbox struct {
	// cond (on the connection's mu) wakes recv: a message, the end of the
	// stream or a failure arrived, or the method's context ended.
	cond sync.Cond
	// buf holds the bytes received and not released: buf[off:scan] are
	// whole messages with their prefixes, buf[scan:] the next one
	// arriving. The message recv returned last ends at off (held bytes)
	// and stays until the next recv; only recv moves bytes within buf.
	buf       []byte
	off, scan int
	held      int
	// zbuf is the inflated message recv returned last, if it was coded.
	zbuf *[]byte
	// charged is what the inbox counts in the connection's buffered.
	charged int
	// window is what the peer may still send on the stream; unacked is
	// taken by recv (or padding) and not yet given back by WINDOW_UPDATE.
	window  int64
	unacked int
	// total counts the DATA received, for content-length.
	total int64
	eof   bool  // the client ended its side
	err   error // the request failed (a status): the call's end
	// closed: the method returned; what arrives is dropped.
	closed bool
}

// startBidi hands a bidirectional call to a goroutine of its own as soon
// as its headers are read: its messages come while it runs.
func (c *conn) startBidi(st *stream) {
	st.in = &inbox{window: int64(c.s.o.MaxRecvMsgSize) + 5, eof: c.hdrEnd}
	st.in.cond.L = &c.mu
	c.mu.Lock()
	st.waiting, st.waitTick = !c.hdrEnd, c.watch.tick
	c.mu.Unlock()
	st.dispatched = true
	c.calls.Add(1)
	c.s.dispatch(st)
}

// onBidiData takes a DATA frame of n bytes (padding included) for a
// bidirectional call whose client has not ended its side.
func (c *conn) onBidiData(st *stream, f *http2.DataFrame, n int) error {
	data, ended := f.Data(), f.StreamEnded()
	st.remoteDone = ended
	c.mu.Lock()
	defer c.mu.Unlock()
	in := st.in
	if in.window -= int64(n); in.window < 0 {
		return connError{http2.ErrCodeFlowControl, fmt.Sprintf("stream %d sent past its window", st.id)}
	}
	defer in.cond.Broadcast()
	in.unacked += n - len(data) // padding is not kept
	in.total += int64(len(data))
	in.eof = ended
	if ended {
		st.waiting = false
	}
	if in.closed && ended {
		st.rstAfter = false // an answer still waiting for window ends the stream
	}
	if in.closed || st.reset || in.err != nil {
		return nil // the call is over or failing: dropped
	}
	if cl := st.contentLength; cl >= 0 && (in.total > cl || ended && in.total != cl) {
		c.o().Log.Debug("malformed gRPC request", "remote", c.nc.RemoteAddr().String(), "stream", st.id,
			"error", fmt.Sprintf("%d bytes of DATA with a content-length of %d", in.total, cl))
		st.remoteDone = true
		c.resets.add(st.id, int(c.o().MaxConcurrentStreams))
		c.out = appendRSTStream(c.out, st.id, http2.ErrCodeProtocol)
		c.resetLocked(st)
		c.flushLocked()
		return nil
	}
	if c.buffered+int64(len(data)) > int64(c.o().MaxRequestBytes) {
		c.failInboxLocked(st, status.Errorf(codes.ResourceExhausted, "grpc: the connection's requests in progress exceed %d bytes", c.o().MaxRequestBytes))
		return nil
	}
	c.buffered += int64(len(data))
	in.charged += len(data)
	in.reserve(len(data))
	in.buf = append(in.buf, data...)
	if err := c.scanLocked(st); err != nil {
		c.failInboxLocked(st, err)
		return nil
	}
	if ended && in.scan < len(in.buf) {
		c.failInboxLocked(st, status.Error(codes.Internal, "grpc: the stream ends inside a message"))
		return nil
	}
	c.streamWindowLocked(st, true)
	return nil
}

func (c *conn) o() *Options { return &c.s.o }

// reserve makes room in buf for n more bytes, and for all of a message
// whose prefix is in, so that a large message is copied once instead of at
// every doubling. The bytes before off (what recv holds) stay where they
// are, in the old buffer; the new one starts at off.
func (in *inbox) reserve(n int) {
	need := len(in.buf) + n
	if rest := in.buf[in.scan:]; len(rest) >= 5 {
		need = max(need, in.scan+5+int(binary.BigEndian.Uint32(rest[1:5])))
	}
	if need <= cap(in.buf) {
		return
	}
	nb := make([]byte, len(in.buf)-in.off, max(need-in.off, 2*(len(in.buf)-in.off)))
	copy(nb, in.buf[in.off:])
	in.buf, in.scan, in.off = nb, in.scan-in.off, 0
}

// scanLocked moves in.scan past the messages that are whole, checking each
// prefix as soon as it is in: a message too large is refused before its
// bytes come (they could not: it would pass the stream's window).
func (c *conn) scanLocked(st *stream) error {
	in := st.in
	for {
		rest := in.buf[in.scan:]
		if len(rest) < 5 {
			return nil
		}
		if rest[0] > 1 || rest[0] == 1 && !st.gzip {
			return status.Error(codes.Internal, "grpc: compressed flag set with identity or empty encoding")
		}
		size := int64(binary.BigEndian.Uint32(rest[1:5]))
		if size > int64(c.o().MaxRecvMsgSize) {
			return status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", size, c.o().MaxRecvMsgSize)
		}
		if int64(len(rest)) < 5+size {
			return nil
		}
		in.scan += 5 + int(size)
		st.waiting = false
	}
}

// failInboxLocked fails st's request with err (a status): what is queued
// is dropped, recv returns err, and the method's context ends.
func (c *conn) failInboxLocked(st *stream, err error) {
	in := st.in
	in.err = err
	drop := len(in.buf) - in.off
	in.buf, in.scan = in.buf[:in.off], in.off
	in.charged -= drop
	c.buffered -= int64(drop)
	c.cancelLocked(st, err)
}

// closeInboxLocked releases st's inbox once its method has returned; a
// client still sending is reset (NO_ERROR) after the answer, and what it
// sent meanwhile is dropped.
func (c *conn) closeInboxLocked(st *stream) {
	in := st.in
	in.closed = true
	in.cond.Broadcast() // a recv still waiting (on another goroutine of the method's) returns
	c.buffered -= int64(in.charged)
	in.charged, in.held = 0, 0
	in.buf, in.off, in.scan = nil, 0, 0
	if in.zbuf != nil {
		putBuf(in.zbuf)
		in.zbuf = nil
	}
	if !in.eof && !st.reset && !c.dead {
		st.rstAfter = true
		c.resets.add(st.id, int(c.o().MaxConcurrentStreams))
	}
}

// streamWindowLocked gives back what st's method has taken of the
// stream's window: once a quarter of the window, or all of it when no
// whole message waits (the client may be waiting for window to send the
// next). The reader (async) has it written at once; recv leaves it queued,
// for the method's next send to carry, or for recv to write before it
// waits.
func (c *conn) streamWindowLocked(st *stream, async bool) {
	in := st.in
	if in.unacked == 0 || in.eof || in.closed || in.err != nil || st.reset || c.dead {
		return
	}
	if in.off < in.scan && in.unacked < (c.o().MaxRecvMsgSize+5)/4 {
		return
	}
	c.out = appendWindowUpdate(c.out, st.id, uint32(in.unacked))
	in.window += int64(in.unacked)
	in.unacked = 0
	if async {
		c.flushLocked()
	}
}

// recv is a bidirectional call's recv (see BidiMethod).
func (c *conn) recv(ctx context.Context, st *stream) ([]byte, error) {
	c.mu.Lock()
	in := st.in
	c.releaseHeldLocked(st)
	for {
		if in.closed {
			c.mu.Unlock()
			return nil, status.Error(codes.Internal, "h2grpc: recv after the method returned")
		}
		if err := in.err; err != nil {
			c.mu.Unlock()
			return nil, err
		}
		if err := c.streamErrLocked(ctx, st); err != nil {
			c.mu.Unlock()
			return nil, err
		}
		if in.off < in.scan {
			break
		}
		if in.eof {
			c.mu.Unlock()
			return nil, io.EOF
		}
		// What is queued (a WINDOW_UPDATE among it) goes out while we
		// wait.
		c.flushWholeLocked()
		st.started() // waiting for its client now
		in.cond.Wait()
	}
	msg := in.buf[in.off:]
	size := 5 + int(binary.BigEndian.Uint32(msg[1:5]))
	msg = msg[:size]
	in.off += size
	in.held = size
	in.unacked += size // taken: its window goes back; its bytes count until released
	c.streamWindowLocked(st, false)
	c.mu.Unlock()
	if msg[0] == 0 {
		return msg[5:], nil
	}
	return c.inflateHeld(st, msg[5:])
}

// releaseHeldLocked releases the message recv returned last, and moves
// what remains of buf to its start once the released part is most of it.
func (c *conn) releaseHeldLocked(st *stream) {
	in := st.in
	if in.zbuf != nil {
		c.buffered -= int64(len(*in.zbuf))
		in.charged -= len(*in.zbuf)
		putBuf(in.zbuf)
		in.zbuf = nil
	}
	if in.held == 0 {
		return
	}
	c.buffered -= int64(in.held)
	in.charged -= in.held
	in.held = 0
	switch {
	case in.off == len(in.buf) && cap(in.buf) > 64<<10:
		in.buf, in.off, in.scan = nil, 0, 0 // large and idle: not pinned
	case in.off == len(in.buf):
		in.buf, in.off, in.scan = in.buf[:0], 0, 0
	case in.off >= cap(in.buf)/2:
		n := copy(in.buf, in.buf[in.off:])
		in.buf, in.scan, in.off = in.buf[:n], in.scan-in.off, 0
	}
}

// inflateHeld decodes a gzip-coded message recv is returning; the message
// decoded counts in MaxRequestBytes until the next recv.
func (c *conn) inflateHeld(st *stream, z []byte) ([]byte, error) {
	out, code, why := c.inflateMsg(z)
	if code != codes.OK {
		err := status.Error(code, why)
		c.mu.Lock()
		c.failInboxLocked(st, err)
		c.mu.Unlock()
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	in := st.in
	if n := len(*out); in.closed || c.buffered+int64(n) > int64(c.o().MaxRequestBytes) {
		putBuf(out)
		err := status.Errorf(codes.ResourceExhausted, "grpc: the connection's requests in progress exceed %d bytes", c.o().MaxRequestBytes)
		if !in.closed {
			c.failInboxLocked(st, err)
		}
		return nil, err
	}
	c.buffered += int64(len(*out))
	in.charged += len(*out)
	in.zbuf = out
	return (*out)[5:], nil
}
