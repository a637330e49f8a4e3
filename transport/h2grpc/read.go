package h2grpc

// The reader: frames in, streams opened, request bytes collected.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// read is the reader goroutine's loop.
func (c *conn) read() error {
	o := &c.s.o
	if err := c.nc.SetReadDeadline(time.Now().Add(o.HandshakeTimeout)); err != nil {
		return err
	}
	br := bufio.NewReaderSize(c.nc, readBufSize)
	defer c.dispatchReady() // calls read before an error still run (and fail to write)
	var pre [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(br, pre[:]); err != nil {
		return fmt.Errorf("reading the client preface: %w", err)
	}
	if !bytes.Equal(pre[:], clientPreface) {
		return fmt.Errorf("not an HTTP/2 client preface: %q", pre[:])
	}
	c.fr = http2.NewFramer(nil, br)
	c.fr.SetReuseFrames()
	// We advertise HTTP/2's default frame size; larger frames are a
	// FRAME_SIZE_ERROR, not a buffer the connection keeps.
	c.fr.SetMaxReadFrameSize(defaultFrameSize)
	c.fr.MaxHeaderListSize = o.MaxHeaderListSize
	c.dec = hpack.NewDecoder(4096, c.onField)
	c.dec.SetMaxStringLength(int(o.MaxHeaderListSize))

	c.sendSettings()

	first := true
	for {
		if c.stallDue.Load() {
			c.releaseStalled()
		}
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.frameError(err)
			return err
		}
		if first {
			if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
				c.goAway(http2.ErrCodeProtocol, "first frame is not SETTINGS")
				return errors.New("first frame from the client is not SETTINGS")
			}
			first = false
			if err := c.nc.SetReadDeadline(time.Time{}); err != nil {
				return err
			}
		}
		if err := c.handle(f); err != nil {
			var ce connError
			if errors.As(err, &ce) {
				c.goAway(ce.code, ce.msg)
			}
			return err
		}
		if len(c.ready) > 0 || c.ackOwed {
			// A peer that keeps the buffer full must not hold back the
			// calls and the acknowledgement read first: at most
			// Options.FramesPerRead frames wait for the end of a read.
			c.framesRead++
			if c.framesRead >= c.s.o.FramesPerRead || !frameBuffered(br) {
				c.endOfRead()
			}
		}
		c.waitOutput()
	}
}

// sendSettings writes our first SETTINGS and opens the connection window
// to Options.ConnWindow.
func (c *conn) sendSettings() {
	o := &c.s.o
	c.mu.Lock()
	defer c.mu.Unlock()
	c.started = true
	c.out = appendSettings(c.out, []http2.Setting{
		{ID: http2.SettingMaxConcurrentStreams, Val: o.MaxConcurrentStreams},
		{ID: http2.SettingInitialWindowSize, Val: uint32(o.MaxRecvMsgSize + 5)},
		{ID: http2.SettingMaxHeaderListSize, Val: o.MaxHeaderListSize},
	})
	c.out = appendWindowUpdate(c.out, 0, o.ConnWindow-defaultWindow)
	c.flushLocked()
}

// frameError answers a frame the framer could not read with the GOAWAY
// it calls for. A stream error from the framer (bad padding, say) may
// leave a header block undecoded and the HPACK state out of step: it ends
// the connection too.
func (c *conn) frameError(err error) {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.Is(err, http2.ErrFrameTooLarge):
		c.goAway(http2.ErrCodeFrameSize, err.Error())
	case errors.As(err, &se):
		c.goAway(http2.ErrCodeProtocol, err.Error())
	case errors.As(err, &ce):
		c.goAway(http2.ErrCode(ce), err.Error())
	}
}

// connError is a connection error: GOAWAY with code, then close.
type connError struct {
	code http2.ErrCode
	msg  string
}

func (e connError) Error() string { return "HTTP/2 " + e.code.String() + ": " + e.msg }

func (c *conn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.HeadersFrame:
		return c.onHeaders(f)
	case *http2.ContinuationFrame:
		return c.onHeaderBlock(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.PingFrame:
		if f.IsAck() {
			if c.onAck(f.Data) {
				return nil
			}
			c.mu.Lock()
			if c.drainAck != nil && f.Data == drainPing {
				close(c.drainAck)
				c.drainAck = nil
			}
			c.mu.Unlock()
		} else {
			return c.onPing(f.Data)
		}
	case *http2.WindowUpdateFrame:
		if c.idle(f.StreamID) {
			return connError{http2.ErrCodeProtocol, fmt.Sprintf("WINDOW_UPDATE on idle stream %d", f.StreamID)}
		}
		return c.onWindowUpdate(f)
	case *http2.RSTStreamFrame:
		if c.idle(f.StreamID) {
			return connError{http2.ErrCodeProtocol, fmt.Sprintf("RST_STREAM on idle stream %d", f.StreamID)}
		}
		c.onReset(f.StreamID)
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			// A stream error, as a connection error: the stream may be
			// idle, and RST_STREAM must not name an idle stream.
			return connError{http2.ErrCodeProtocol, fmt.Sprintf("stream %d depends on itself", f.StreamID)}
		}
	case *http2.GoAwayFrame:
		// The client opens no more streams; what it has open is answered.
	case *http2.PushPromiseFrame:
		return connError{http2.ErrCodeProtocol, "a client sent PUSH_PROMISE"}
	}
	// Unknown frame types are ignored, as RFC 9113 asks.
	return nil
}

func (c *conn) onHeaders(f *http2.HeadersFrame) error {
	id := f.StreamID
	if id%2 == 0 || id <= c.lastID {
		// Trailers from a client on an open stream would be legal HTTP/2,
		// but gRPC unary clients end with DATA; anything else is an error.
		return connError{http2.ErrCodeProtocol, fmt.Sprintf("HEADERS on stream %d after stream %d", id, c.lastID)}
	}
	c.mu.Lock() // drain reads it
	c.lastID = id
	c.mu.Unlock()
	st := &stream{c: c, id: id}
	c.hdr.reset()
	c.hdrStream, c.hdrSize, c.hdrTooLarge = st, 0, false
	c.hdrRaw, c.hdrFrames, c.hdrEnd = 0, 0, f.StreamEnded()
	if f.HasPriority() && f.Priority.StreamDep == id {
		c.hdr.malformed = "the stream depends on itself"
	}
	return c.onHeaderBlock(f.HeaderBlockFragment(), f.HeadersEnded())
}

// onHeaderBlock decodes a HEADERS or CONTINUATION fragment; at the end of
// the block the stream opens (or is refused or answered at once).
func (c *conn) onHeaderBlock(frag []byte, end bool) error {
	if c.hdrStream == nil {
		return connError{http2.ErrCodeProtocol, "CONTINUATION without HEADERS"}
	}
	c.hdrRaw += len(frag)
	c.hdrFrames++
	if c.hdrRaw > 2*int(c.s.o.MaxHeaderListSize) || c.hdrFrames > 64 {
		return connError{http2.ErrCodeEnhanceYourCalm, "header block too large"}
	}
	if _, err := c.dec.Write(frag); err != nil {
		return connError{http2.ErrCodeCompression, err.Error()}
	}
	if !end {
		return nil
	}
	if err := c.dec.Close(); err != nil {
		return connError{http2.ErrCodeCompression, err.Error()}
	}
	st := c.hdrStream
	c.hdrStream = nil
	return c.open(st)
}

// open starts a stream whose headers are complete.
func (c *conn) open(st *stream) error {
	o := &c.s.o
	h := &c.hdr
	st.remoteDone = c.hdrEnd
	if !c.hdrTooLarge {
		if h.checkRequest(c.hdrEnd); h.malformed != "" {
			// A stream error (RFC 9113 section 8.1.1), without an answer.
			o.Log.Debug("malformed gRPC request", "remote", c.nc.RemoteAddr().String(), "stream", st.id, "error", h.malformed)
			c.resetStream(st.id, http2.ErrCodeProtocol)
			return nil
		}
	}
	bidi := o.BidiMethods[h.path] != nil
	c.mu.Lock()
	refuse := c.phase2 || uint32(len(c.live)) >= o.MaxConcurrentStreams
	if !refuse {
		c.live[st.id] = st
		st.sendWindow = c.peerInitWindow
		c.openedLocked(st, bidi)
	}
	c.mu.Unlock()
	if refuse {
		c.resetStream(st.id, http2.ErrCodeRefusedStream)
		return nil
	}
	// early is the status to answer without running a method.
	early, earlyMsg := codes.OK, ""
	switch {
	case c.hdrTooLarge:
		early, earlyMsg = codes.Internal, fmt.Sprintf("header list size exceeds the limit %d", o.MaxHeaderListSize)
	case h.method != "POST":
		c.answerHTTPError(st, "405", codes.Internal, fmt.Sprintf("grpc: the request's :method is %q, not POST", h.method), h.method == "HEAD")
		return nil
	case !isGRPCContentType(h.contentType):
		c.answerHTTPError(st, "415", codes.InvalidArgument, fmt.Sprintf("grpc: invalid gRPC request content-type %q", h.contentType), false)
		return nil
	case !c.acceptEncoding(st, h.encoding):
		early, earlyMsg = codes.Unimplemented, fmt.Sprintf("grpc: Decompressor is not installed for grpc-encoding %q", h.encoding)
	case c.hdrEnd && o.BidiMethods[h.path] == nil:
		// A client-streaming call may send no message at all.
		early, earlyMsg = codes.Internal, "grpc: the request has no message"
	}
	if early == codes.OK && h.timeout != "" {
		d, err := parseTimeout(h.timeout)
		if err != nil {
			// HTTP 400 with the status in the same HEADERS, as grpc-go.
			c.answerHTTPError(st, "400", codes.Internal, "malformed grpc-timeout: "+err.Error(), true)
			return nil
		}
		// Counted from the headers, as the client counts it from
		// sending them. "0m" is a deadline already past, not none.
		st.deadline = time.Now().Add(max(d, 1))
	}
	if early == codes.OK {
		st.method, st.streaming, st.bidi = o.Methods[h.path], o.StreamMethods[h.path], o.BidiMethods[h.path]
		if st.batch = o.Batches[h.path]; st.batch != nil {
			st.path = h.path
		}
		if !st.served() {
			early, earlyMsg = codes.Unimplemented, unknownMethod(h.path)
		}
		st.contentLength = h.contentLength
	}
	if early != codes.OK {
		// Answered before any DATA: the rest of the request is not needed
		// (unless the client has ended its side already).
		st.method, st.streaming, st.bidi = nil, nil, nil
		c.finish(st, nil, early, earlyMsg)
		if !c.hdrEnd {
			c.resetStream(st.id, http2.ErrCodeNo)
		}
	} else if st.bidi != nil {
		c.startBidi(st)
	}
	return nil
}

func isGRPCContentType(ct string) bool {
	const base = "application/grpc"
	if !strings.HasPrefix(ct, base) {
		return false
	}
	return len(ct) == len(base) || ct[len(base)] == '+' || ct[len(base)] == ';'
}

// unknownMethod is grpc-go's message for a call nobody serves.
func unknownMethod(path string) string {
	p := strings.TrimPrefix(path, "/")
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return fmt.Sprintf("malformed method name: %q", path)
	}
	return fmt.Sprintf("unknown method %s for service %s", p[i+1:], p[:i])
}

func (c *conn) onData(f *http2.DataFrame) error {
	id := f.StreamID
	n := int(f.Length) // padding counts against flow control too
	c.mu.Lock()
	st := c.live[id]
	// The connection window goes back as bytes arrive: holding it until a
	// request is served let a few large requests in progress starve each
	// other. Request memory is bounded by MaxRequestBytes instead.
	c.giveBackLocked(n)
	c.mu.Unlock()
	if c.idle(id) {
		return connError{http2.ErrCodeProtocol, fmt.Sprintf("DATA on idle stream %d", id)}
	}
	if st == nil || st.remoteDone || !st.served() || st.charged < 0 {
		return c.dataNotServed(st, id) // answered early, reset, ended or refused
	}
	if st.bidi != nil {
		return c.onBidiData(st, f, n)
	}
	o := &c.s.o
	st.recvd += int64(n)
	if st.recvd > int64(o.MaxRecvMsgSize)+5 {
		return connError{http2.ErrCodeFlowControl, fmt.Sprintf("stream %d sent past its window", id)}
	}
	ended := f.StreamEnded()
	st.remoteDone = ended
	data := f.Data()
	stalled, full := c.charge(st, len(data), ended)
	if stalled {
		c.release(st)
		return nil
	}
	if full {
		c.fail(st, ended, codes.ResourceExhausted, fmt.Sprintf("grpc: the connection's requests in progress exceed %d bytes", o.MaxRequestBytes))
		return nil
	}
	if st.msg == nil {
		st.msg = getBuf(len(data))
	}
	*st.msg = append(*st.msg, data...)
	msg := *st.msg
	if cl := st.contentLength; cl >= 0 && (int64(len(msg)) > cl || ended && int64(len(msg)) != cl) {
		c.malformedData(st, fmt.Sprintf("%d bytes of DATA with a content-length of %d", len(msg), cl))
		return nil
	}
	if len(msg) >= 5 {
		if msg[0] > 1 || msg[0] == 1 && !st.gzip {
			c.fail(st, ended, codes.Internal, "grpc: compressed flag set with identity or empty encoding")
			return nil
		}
		if size := binary.BigEndian.Uint32(msg[1:5]); int64(size) > int64(o.MaxRecvMsgSize) {
			c.fail(st, ended, codes.ResourceExhausted, fmt.Sprintf("grpc: received message larger than max (%d vs. %d)", size, o.MaxRecvMsgSize))
			return nil
		}
	}
	if !ended {
		return nil
	}
	if len(msg) < 5 || int(binary.BigEndian.Uint32(msg[1:5])) != len(msg)-5 {
		c.fail(st, true, codes.Internal, "grpc: the request is not one whole message")
		return nil
	}
	if msg[0] == 1 {
		if code, why := c.inflate(st); code != codes.OK {
			c.fail(st, true, code, why)
			return nil
		}
	}
	st.dispatched = true
	c.calls.Add(1)
	if st.streaming != nil {
		c.s.dispatch(st)
	} else {
		c.ready = append(c.ready, st)
	}
	return nil
}

// charge counts n request bytes of st in the connection's, unless that
// would pass MaxRequestBytes (full) or st was answered as stalled
// (idle.go) since the reader looked it up (stalled: the bytes are dropped).
func (c *conn) charge(st *stream, n int, ended bool) (stalled, full bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.done {
		return true, false
	}
	if c.buffered+int64(n) > int64(c.s.o.MaxRequestBytes) {
		return false, true
	}
	c.buffered += int64(n)
	st.charged += n
	if ended {
		st.waiting = false
	}
	return false, false
}

// frameBuffered reports whether a whole frame is already read: if not, the
// next ReadFrame may wait for the peer.
func frameBuffered(br *bufio.Reader) bool {
	n := br.Buffered()
	if n < 9 {
		return false
	}
	h, _ := br.Peek(9)
	return n >= 9+(int(h[0])<<16|int(h[1])<<8|int(h[2]))
}

// onReset is the peer giving up a stream: drop its answer; a request not
// yet complete gives its window back.
func (c *conn) onReset(id uint32) {
	c.mu.Lock()
	st := c.live[id]
	if st != nil {
		c.resetLocked(st)
		if len(c.blocked) > 0 {
			c.sendBlockedLocked() // retires it if it waits for window
		}
	}
	c.resets.forget(id)
	c.mu.Unlock()
	if st == nil {
		return
	}
	// A bidirectional call's method owns its request: it ends the stream.
	receiving := !st.remoteDone && st.served() && st.charged >= 0 && st.bidi == nil
	st.remoteDone = true
	if receiving {
		c.release(st)
		c.mu.Lock()
		c.endLocked(st)
		c.mu.Unlock()
	}
}
