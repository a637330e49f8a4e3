package h2grpc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// finish answers st with resp (the message with its 5-byte prefix; nil for
// a status without a message) and the status, within the peer's flow
// control. A worker (fromReader false) waits while the connection's output
// is over its bound; the reader never waits.
func (c *conn) finish(st *stream, resp []byte, code codes.Code, msg string) {
	fromReader := !st.dispatched
	c.mu.Lock()
	defer c.mu.Unlock()
	if !fromReader {
		for !c.dead && len(c.out) > c.s.o.MaxOutput {
			c.cond.Wait()
		}
	}
	c.answerLocked(st, resp, code, msg)
	c.flushLocked()
}

// answerLocked queues st's answer (see finish) without writing it.
func (c *conn) answerLocked(st *stream, resp []byte, code codes.Code, msg string) {
	switch {
	case c.dead || st.reset:
		// Dropped; the write below still carries what waited for it (a
		// PING acknowledgement).
		c.endLocked(st)
	case resp == nil:
		c.answers++
		c.out = appendHeaders(c.out, st.id, trailersOnlyFor(st, code, msg), true)
		c.endLocked(st)
	default:
		c.answers++
		c.out = appendHeaders(c.out, st.id, respHeadersFor(st), false)
		c.queueDataLocked(st, resp)
		tr := trailerOK
		if code != codes.OK {
			tr = trailers(code, msg)
		}
		c.endStreamLocked(st, tr)
	}
}

// answerOf is what a method's return makes of a call's answer: the message
// (its length written into the 5 bytes reserved) or none, and the status.
func answerOf(resp []byte, err error) ([]byte, codes.Code, string) {
	switch {
	case err != nil:
		code, msg := statusOf(err)
		return nil, code, msg
	case len(resp) < 5:
		return nil, codes.Internal, "h2grpc: the method dropped its output buffer"
	}
	binary.BigEndian.PutUint32(resp[1:5], uint32(len(resp)-5))
	return resp, codes.OK, ""
}

// queueDataLocked sends p on st within the peer's windows, or keeps a copy
// (p is the caller's buffer) to send, oldest first, when WINDOW_UPDATE
// allows.
func (c *conn) queueDataLocked(st *stream, p []byte) {
	n := int64(len(p))
	if len(c.blocked) == 0 && n <= st.sendWindow && n <= c.connSendWindow {
		c.out = c.appendDataLocked(c.out, st, p)
		return
	}
	if len(st.pending) == 0 { // not waiting yet
		c.blocked = append(c.blocked, st)
	}
	st.pending = append(st.pending, p...)
	c.sendBlockedLocked()
}

// endStreamLocked ends st with the trailers block tr, at once or after the
// DATA that waits for window.
func (c *conn) endStreamLocked(st *stream, tr []byte) {
	if len(st.pending) > 0 {
		st.trailer = tr
		return
	}
	c.out = appendHeaders(c.out, st.id, tr, true)
	c.endedLocked(st)
}

// endedLocked retires st, whose answer is complete: a request still
// coming is reset (NO_ERROR: the answer is all there is).
func (c *conn) endedLocked(st *stream) {
	if st.rstAfter {
		c.out = appendRSTStream(c.out, st.id, http2.ErrCodeNo)
	}
	c.endLocked(st)
}

// appendDataLocked appends p as DATA frames no larger than the peer allows
// and takes it from both windows (the caller checked they suffice).
func (c *conn) appendDataLocked(b []byte, st *stream, p []byte) []byte {
	// Data going out makes the peer's next PING free: clients measure the
	// bandwidth-delay product with a PING per window of data they receive
	// (grpc-go's BDP estimator), so a long answer brings many PINGs and
	// few answers.
	c.answers++
	st.sendWindow -= int64(len(p))
	c.connSendWindow -= int64(len(p))
	for len(p) > 0 {
		n := min(len(p), c.peerMaxFrame)
		b = appendFrameHeader(b, n, http2.FrameData, 0, st.id)
		b = append(b, p[:n]...)
		p = p[n:]
	}
	return b
}

// sendBlockedLocked sends what the windows now allow of the answers
// waiting for them, oldest first.
func (c *conn) sendBlockedLocked() {
	kept := c.blocked[:0]
	for _, st := range c.blocked {
		if st.reset || c.dead {
			c.endLocked(st)
			continue
		}
		n := min(int64(len(st.pending)), st.sendWindow, c.connSendWindow)
		if n > 0 {
			c.out = c.appendDataLocked(c.out, st, st.pending[:n])
			st.pending = st.pending[n:]
		}
		if len(st.pending) > 0 {
			kept = append(kept, st)
			continue
		}
		if st.trailer == nil {
			continue // a streaming call whose method still runs
		}
		c.out = appendHeaders(c.out, st.id, st.trailer, true)
		c.endedLocked(st)
	}
	clear(c.blocked[len(kept):])
	c.blocked = kept
}

// endLocked retires a stream: its answer is written or dropped.
func (c *conn) endLocked(st *stream) {
	if st.done {
		return
	}
	st.done = true
	st.pending = nil
	delete(c.live, st.id)
	c.closeIfIdleLocked()
}

// answerHTTPError answers a request that is not gRPC with an HTTP status,
// a short text saying why and the gRPC status grpc-go would give in the
// trailers (for HEAD, or with head set, only headers carrying the gRPC
// status too). A request still coming is then reset
// (NO_ERROR), once the answer is complete. The reader calls it.
func (c *conn) answerHTTPError(st *stream, status string, code codes.Code, msg string, head bool) {
	block := appendLiteral(nil, 8, "", status) // :status, by static name
	block = appendLiteral(block, 31, "", "text/plain; charset=utf-8")
	c.mu.Lock()
	if !st.remoteDone {
		st.rstAfter = true
		c.resets.add(st.id, int(c.s.o.MaxConcurrentStreams))
	}
	c.answers++
	if head {
		c.out = appendHeaders(c.out, st.id, append(block, trailers(code, msg)...), true)
		c.endedLocked(st)
	} else {
		c.out = appendHeaders(c.out, st.id, block, false)
		c.queueDataLocked(st, []byte(msg+"\n"))
		c.endStreamLocked(st, trailers(code, msg))
	}
	c.flushLocked()
	c.mu.Unlock()
}

// flushLocked hands what is queued to the connection's writer. Called
// and returns with mu held; nothing is written before it returns.
func (c *conn) flushLocked() {
	if c.mayWriteLocked() {
		c.wcond.Signal()
	}
}

// flushWholeLocked is flushLocked for a caller that queued all it had (a
// batch's answers, expired calls' statuses): the writer writes at once
// instead of first yielding for other answers to join the write, which
// here would only add a round of the scheduler to every answer (10
// callers on 4 connections: 12 % fewer decisions/s).
func (c *conn) flushWholeLocked() {
	c.whole = true
	c.flushLocked()
}

// mayWriteLocked reports whether a write may start: there is output, the
// connection takes it, and nobody is writing.
func (c *conn) mayWriteLocked() bool {
	return !c.writing && !c.dead && !c.lingering && len(c.out) > 0
}

// writeLoop is the connection's writer, its only one: it sleeps until
// there is output (flushLocked) and writes it until the connection dies.
// The reader, methods and timers only append to out under mu; one
// goroutine owns the socket's write side, as grpc-go's loopyWriter does.
func (c *conn) writeLoop() {
	defer c.writers.Done()
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for !c.dead && !c.mayWriteLocked() {
			c.wcond.Wait()
		}
		if c.dead {
			return
		}
		c.writing = true
		c.writeLocked()
	}
}

// flushWaitLocked hands the output to the writer and waits until it is
// written (or the connection died).
func (c *conn) flushWaitLocked() {
	c.flushLocked()
	for !c.dead && (c.writing || (len(c.out) > 0 && !c.lingering)) {
		c.cond.Wait()
	}
}

// writeLocked is one turn of the writer: swap the buffers, write without
// the lock, repeat while more piled up; yield once first while the output
// is small, unless it is whole (flushWholeLocked).
func (c *conn) writeLocked() {
	yield := !c.whole
	for len(c.out) > 0 && !c.dead {
		if yield && len(c.out) < c.s.o.WriteYieldBelow {
			// Answers of one backend call become ready together: let the
			// other waiters that just woke add theirs, so that one write
			// carries them all.
			yield = false
			c.mu.Unlock()
			runtime.Gosched()
			c.mu.Lock()
			continue
		}
		yield = false
		buf := c.out
		c.out = c.spare[:0]
		c.spare = nil
		c.mu.Unlock()
		// A peer that stops reading is cut off rather than holding this
		// goroutine, and behind it every call of the connection.
		err := c.nc.SetWriteDeadline(time.Now().Add(c.s.o.WriteTimeout))
		if err == nil {
			_, err = c.nc.Write(buf)
		}
		c.mu.Lock()
		if cap(buf) <= 4*c.s.o.MaxOutput {
			c.spare = buf[:0]
		}
		c.cond.Broadcast()
		if err != nil {
			c.writing = false
			c.mu.Unlock()
			c.close(fmt.Errorf("writing: %w", err))
			c.mu.Lock()
			return
		}
	}
	c.writing = false
	c.whole = false // what it marked went out in this turn
	c.cond.Broadcast()
	c.closeIfIdleLocked()
}

// waitOutput holds the reader while the output is over its bound: a peer
// that does not read stops being read.
func (c *conn) waitOutput() {
	c.mu.Lock()
	over := len(c.out) > c.s.o.MaxOutput
	c.mu.Unlock()
	if !over {
		return
	}
	// Calls and acknowledgements read so far must not wait behind the
	// peer, nor what the reader queued unwritten be what it waits for.
	c.endOfRead()
	c.mu.Lock()
	c.flushLocked()
	for !c.dead && len(c.out) > c.s.o.MaxOutput {
		c.cond.Wait()
	}
	c.mu.Unlock()
}

// statusOf is the gRPC status of a method's error.
func statusOf(err error) (codes.Code, string) {
	if s, ok := status.FromError(err); ok {
		return s.Code(), s.Message()
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		s := status.FromContextError(err)
		return s.Code(), s.Message()
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Code(), se.GRPCStatus().Message()
	}
	return codes.Unknown, err.Error()
}

// Header blocks. They use no dynamic table, so they are the same on every
// connection and can be made once: literal fields "without indexing".
var (
	respHeaders = appendLiteral([]byte{0x80 | 8}, 31, "", "application/grpc") // :status 200, content-type
	trailerOK   = trailers(codes.OK, "")
)

// maxStatusMessage bounds grpc-message before percent-encoding (which at
// most triples it).
const maxStatusMessage = 4 << 10

func trailers(code codes.Code, msg string) []byte {
	b := appendLiteral(nil, 0, "grpc-status", strconv.Itoa(int(code)))
	if len(msg) > maxStatusMessage {
		// One HEADERS frame must hold the block (16 KiB at least).
		cut := maxStatusMessage
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "..."
	}
	if msg != "" {
		b = appendLiteral(b, 0, "grpc-message", encodeGRPCMessage(msg))
	}
	return b
}

// appendLiteral appends an HPACK "literal header field without indexing":
// by static-table name index, or with a literal name when index is 0.
func appendLiteral(b []byte, index uint64, name, value string) []byte {
	b = appendVarInt(b, 4, 0x00, index)
	if index == 0 {
		b = appendVarInt(b, 7, 0x00, uint64(len(name)))
		b = append(b, name...)
	}
	b = appendVarInt(b, 7, 0x00, uint64(len(value)))
	return append(b, value...)
}

// appendVarInt is HPACK's integer with an n-bit prefix (RFC 7541 5.1).
func appendVarInt(b []byte, n uint, first byte, v uint64) []byte {
	k := uint64(1)<<n - 1
	if v < k {
		return append(b, first|byte(v))
	}
	b = append(b, first|byte(k))
	v -= k
	for v >= 128 {
		b = append(b, byte(0x80|v&0x7f))
		v >>= 7
	}
	return append(b, byte(v))
}

// encodeGRPCMessage percent-encodes a status message as the gRPC HTTP/2
// protocol asks: bytes outside printable ASCII, and '%'.
func encodeGRPCMessage(msg string) string {
	clean := true
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; c < 0x20 || c > 0x7e || c == '%' {
			clean = false
			break
		}
	}
	if clean {
		return msg
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(msg)+8)
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c < 0x20 || c > 0x7e || c == '%' {
			b = append(b, '%', hex[c>>4], hex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

var timeoutUnits = map[byte]time.Duration{
	'H': time.Hour, 'M': time.Minute, 'S': time.Second,
	'm': time.Millisecond, 'u': time.Microsecond, 'n': time.Nanosecond,
}

// parseTimeout reads a grpc-timeout value: at most 8 digits and a unit.
func parseTimeout(s string) (time.Duration, error) {
	if len(s) < 2 || len(s) > 9 {
		return 0, fmt.Errorf("%q is not 1 to 8 digits and a unit", s)
	}
	unit, ok := timeoutUnits[s[len(s)-1]]
	if !ok {
		return 0, fmt.Errorf("%q has no known unit", s)
	}
	v, err := strconv.ParseUint(s[:len(s)-1], 10, 64)
	if err != nil || s[0] == '+' {
		return 0, fmt.Errorf("%q is not a number and a unit", s)
	}
	if d := time.Duration(v); d > (1<<63-1)/unit {
		return 1<<63 - 1, nil
	}
	return time.Duration(v) * unit, nil
}

// Frame writers (RFC 9113 section 4.1 and 6).

func appendFrameHeader(b []byte, length int, t http2.FrameType, flags http2.Flags, id uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), byte(t), byte(flags),
		byte(id>>24)&0x7f, byte(id>>16), byte(id>>8), byte(id))
}

// appendHeaders appends a HEADERS frame with the whole block (our blocks
// are small; the peer's frame size is at least 16 KiB).
func appendHeaders(b []byte, id uint32, block []byte, endStream bool) []byte {
	flags := http2.FlagHeadersEndHeaders
	if endStream {
		flags |= http2.FlagHeadersEndStream
	}
	// Every block starts with a dynamic table size update to 0: we never
	// index, and a peer that lowered SETTINGS_HEADER_TABLE_SIZE must see
	// the update before our next block (RFC 7541 4.2); at the start of any
	// block it is legal and costs a byte.
	b = appendFrameHeader(b, len(block)+1, http2.FrameHeaders, flags, id)
	b = append(b, 0x20)
	return append(b, block...)
}

func appendSettings(b []byte, ss []http2.Setting) []byte {
	b = appendFrameHeader(b, 6*len(ss), http2.FrameSettings, 0, 0)
	for _, s := range ss {
		b = binary.BigEndian.AppendUint16(b, uint16(s.ID))
		b = binary.BigEndian.AppendUint32(b, s.Val)
	}
	return b
}

func appendSettingsAck(b []byte) []byte {
	return appendFrameHeader(b, 0, http2.FrameSettings, http2.FlagSettingsAck, 0)
}

func appendPing(b []byte, data [8]byte) []byte { return appendPingFrame(b, data, true) }

func appendPingFrame(b []byte, data [8]byte, ack bool) []byte {
	var flags http2.Flags
	if ack {
		flags = http2.FlagPingAck
	}
	b = appendFrameHeader(b, 8, http2.FramePing, flags, 0)
	return append(b, data[:]...)
}

func appendWindowUpdate(b []byte, id, inc uint32) []byte {
	b = appendFrameHeader(b, 4, http2.FrameWindowUpdate, 0, id)
	return binary.BigEndian.AppendUint32(b, inc&0x7fffffff)
}

func appendRSTStream(b []byte, id uint32, code http2.ErrCode) []byte {
	b = appendFrameHeader(b, 4, http2.FrameRSTStream, 0, id)
	return binary.BigEndian.AppendUint32(b, uint32(code))
}

func appendGoAway(b []byte, last uint32, code http2.ErrCode, debug []byte) []byte {
	b = appendFrameHeader(b, 8+len(debug), http2.FrameGoAway, 0, 0)
	b = binary.BigEndian.AppendUint32(b, last&0x7fffffff)
	b = binary.BigEndian.AppendUint32(b, uint32(code))
	return append(b, debug...)
}
