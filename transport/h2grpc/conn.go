package h2grpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

const (
	// maxWindow is the largest flow-control window HTTP/2 allows.
	maxWindow = 1<<31 - 1
	// defaultWindow and defaultFrameSize are HTTP/2's initial values.
	defaultWindow    = 65535
	defaultFrameSize = 16384
	// readBufSize is the connection reader's buffer.
	readBufSize = 32 << 10
)

var clientPreface = []byte(http2.ClientPreface)

// stream is one call. The reader owns it until the request is complete;
// then a worker does. Fields under "mu" belong to the connection's mutex.
type stream struct {
	c      *conn
	id     uint32
	method Method
	// deadline is when the grpc-timeout header, counted from the
	// request's headers, runs out; zero without one.
	deadline time.Time
	// msg collects the request's DATA; held is its size, counted in the
	// connection's buffered bytes until the method is done (-1: released).
	msg  *[]byte
	held int
	// recvd counts DATA bytes against the stream window we granted.
	recvd int64
	// contentLength is the request's content-length, or -1.
	contentLength int64
	// remoteDone: the peer ended the stream (END_STREAM) or reset it.
	remoteDone bool
	// gzip: the request's grpc-encoding is gzip; coded: it named one, and
	// the answer tells which we accept (grpc-accept-encoding).
	gzip, coded bool
	// dispatched: the request is complete and a worker owns the stream.
	dispatched bool
	// streaming is the method of a server-streaming call (method is nil).
	streaming StreamMethod
	// batch and path: the method may serve calls read together
	// (Options.Batches). group is the calls of a batch, this one first,
	// on the stream a worker is given, and serve what the batch method
	// returned for them when they were dispatched.
	batch BatchMethod
	path  string
	group []*stream
	serve BatchServe

	// mu: flow control of our DATA and the stream's end.
	sendWindow int64              // the peer's stream window updates minus what we sent, plus its initial window at creation
	reset      bool               // the peer reset the stream: drop what is left
	done       bool               // our END_STREAM is written or dropped
	pending    []byte             // DATA payload waiting for window
	trailer    []byte             // trailers block to send after pending; nil while a stream's method runs
	headerSent bool               // a streaming call's response HEADERS went out
	cancel     context.CancelFunc // a streaming call's context, cancelled by RST_STREAM
	answered   bool               // a batch call's status went out while its batch runs (deadline)
	rstAfter   bool               // RST_STREAM(NO_ERROR) follows the answer: the request is still coming
}

func (st *stream) served() bool { return st.method != nil || st.streaming != nil }

// conn is one HTTP/2 connection.
type conn struct {
	s  *Server
	nc net.Conn

	ctx    context.Context // cancelled when the connection closes
	cancel context.CancelFunc

	ageTimer *time.Timer
	calls    sync.WaitGroup // methods running
	writers  sync.WaitGroup // writes started for the reader

	// Reader-owned.
	fr          *http2.Framer
	dec         *hpack.Decoder
	hdrStream   *stream // the stream whose header block is being decoded
	hdrSize     uint32  // decoded size of the block's fields
	hdrRaw      int     // encoded bytes and frames of the block, bounded
	hdrFrames   int     // against CONTINUATION floods
	hdrEnd      bool    // the HEADERS frame ended the stream
	hdrTooLarge bool
	sentGoAway  bool // a connection error's GOAWAY went out
	lingering   bool // mu: the connection is closing; nothing more is written
	hdr         reqHeaders
	lastID      uint32
	ready       []*stream // complete unary calls not yet dispatched
	ackOwed     bool      // a PING acknowledgement waits in out for a write
	framesRead  int       // frames read since ready or ackOwed became non-empty
	resets      ourResets // streams we reset while their request was coming
	flood       floodGuard

	mu   sync.Mutex
	cond sync.Cond // output drained below MaxOutput, or the connection died
	out  []byte    // frames to write
	// spare is the buffer the writer gives back, reused for out.
	spare   []byte
	writing bool
	dead    bool
	// live counts the streams opened and not yet finished (answer written
	// or dropped); it is what MaxConcurrentStreams bounds.
	live map[uint32]*stream
	// recvUnacked is connection window received and not yet given back
	// by WINDOW_UPDATE.
	recvUnacked int
	// buffered is the request bytes held by streams being received or
	// served (bounded by MaxRequestBytes).
	buffered int64
	blocked  []*stream // streams with DATA waiting for window, in order
	// Peer settings that shape what we send.
	peerInitWindow int64
	peerMaxFrame   int
	connSendWindow int64
	// answers counts the answers queued, for the PING flood guard.
	answers uint64
	// draining: a GOAWAY went out; new streams are refused and the
	// connection closes once live is empty.
	started  bool // our SETTINGS are queued: frames may follow them
	draining bool
	phase2   bool          // the GOAWAY naming the last stream went out
	drainAck chan struct{} // closed when the drain's PING is answered
	closed   chan struct{}
}

func newConn(s *Server, nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &conn{
		s: s, nc: nc, ctx: ctx, cancel: cancel,
		live:           map[uint32]*stream{},
		peerInitWindow: defaultWindow,
		peerMaxFrame:   defaultFrameSize,
		connSendWindow: defaultWindow,
		closed:         make(chan struct{}),
	}
	c.cond.L = &c.mu
	return c
}

// serve reads the connection until it ends, then waits for its methods.
func (c *conn) serve() {
	err := c.read()
	if c.sentGoAway {
		c.linger()
	}
	c.close(err)
	c.calls.Wait()
	c.writers.Wait()
	if c.ageTimer != nil {
		c.ageTimer.Stop()
	}
}

// close ends the connection once: running methods see their context
// cancelled, waiting appenders are released.
func (c *conn) close(err error) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead = true
	c.cond.Broadcast()
	c.mu.Unlock()
	c.cancel()
	c.nc.Close()
	close(c.closed)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		c.s.o.Log.Debug("gRPC connection closed", "remote", c.nc.RemoteAddr().String(), "error", err)
	}
}

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

	c.mu.Lock()
	c.started = true
	c.out = appendSettings(c.out, []http2.Setting{
		{ID: http2.SettingMaxConcurrentStreams, Val: o.MaxConcurrentStreams},
		{ID: http2.SettingInitialWindowSize, Val: uint32(o.MaxRecvMsgSize + 5)},
		{ID: http2.SettingMaxHeaderListSize, Val: o.MaxHeaderListSize},
	})
	c.out = appendWindowUpdate(c.out, 0, o.ConnWindow-defaultWindow)
	c.flushLocked(true)
	c.mu.Unlock()

	first := true
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			// A stream error from the framer (bad padding, say) may leave
			// a header block undecoded and the HPACK state out of step:
			// it ends the connection too.
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
	c.mu.Lock()
	refuse := c.phase2 || uint32(len(c.live)) >= o.MaxConcurrentStreams
	if !refuse {
		c.live[st.id] = st
		st.sendWindow = c.peerInitWindow
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
	case c.hdrEnd:
		early, earlyMsg = codes.Internal, "grpc: the request has no message"
	}
	if early == codes.OK && h.timeout != "" {
		d, err := parseTimeout(h.timeout)
		if err != nil {
			early, earlyMsg = codes.Internal, "malformed grpc-timeout: "+err.Error()
		}
		// Counted from the headers, as the client counts it from
		// sending them. "0m" is a deadline already past, not none.
		st.deadline = time.Now().Add(max(d, 1))
	}
	if early == codes.OK {
		st.method, st.streaming = o.Methods[h.path], o.StreamMethods[h.path]
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
		st.method, st.streaming = nil, nil
		c.finish(st, nil, early, earlyMsg)
		if !c.hdrEnd {
			c.resetStream(st.id, http2.ErrCodeNo)
		}
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
	if st == nil || st.remoteDone || !st.served() || st.held < 0 {
		return c.dataNotServed(st, id) // answered early, reset, ended or refused
	}
	o := &c.s.o
	st.recvd += int64(n)
	if st.recvd > int64(o.MaxRecvMsgSize)+5 {
		return connError{http2.ErrCodeFlowControl, fmt.Sprintf("stream %d sent past its window", id)}
	}
	ended := f.StreamEnded()
	st.remoteDone = ended
	data := f.Data()
	c.mu.Lock()
	full := c.buffered+int64(len(data)) > int64(o.MaxRequestBytes)
	if !full {
		c.buffered += int64(len(data))
		st.held += len(data)
	}
	c.mu.Unlock()
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

// endOfRead dispatches the calls read so far. A PING acknowledgement
// queued since the last write goes out in the next write, which the first
// of their answers makes: one write instead of two (grpc-go's clients send
// a PING with every batch of calls once answers flow). With no calls to
// carry it, it is written now.
func (c *conn) endOfRead() {
	c.framesRead = 0
	owed := c.ackOwed
	c.ackOwed = false
	if len(c.ready) > 0 {
		c.dispatchReady() // every answer's finish writes, reset or not
		return
	}
	if owed {
		c.mu.Lock()
		c.flushAsyncLocked()
		c.mu.Unlock()
	}
}

// dispatchReady hands the complete unary calls read since the last time to
// workers: two or more of a batch method go to one worker as a batch, the
// others one per worker.
func (c *conn) dispatchReady() {
	if len(c.ready) > 1 {
		c.dispatchBatch()
	}
	for i, st := range c.ready {
		c.s.dispatch(st)
		c.ready[i] = nil
	}
	c.ready = c.ready[:0]
}

// dispatchBatch takes out of ready the calls of the first batch method
// among them, if it has two or more, and gives them to one worker.
func (c *conn) dispatchBatch() {
	path := ""
	n := 0
	for _, st := range c.ready {
		if st.batch != nil && (path == "" || st.path == path) {
			path = st.path
			n++
		}
	}
	if n < 2 {
		return
	}
	group := make([]*stream, 0, n)
	rest := c.ready[:0]
	for _, st := range c.ready {
		if st.batch != nil && st.path == path {
			group = append(group, st)
		} else {
			rest = append(rest, st)
		}
	}
	clear(c.ready[len(rest):])
	c.ready = rest
	st := group[0]
	// Before the batch waits for a worker: what serves it may start
	// getting ready (the rate limit service opens its batch here).
	st.group, st.serve = group, st.batch()
	c.s.dispatch(st)
}

// fail answers st with a status before its method runs and drops its
// request.
func (c *conn) fail(st *stream, ended bool, code codes.Code, msg string) {
	c.release(st)
	st.method, st.streaming = nil, nil
	c.finish(st, nil, code, msg)
	if !ended {
		c.resetStream(st.id, http2.ErrCodeNo) // the rest is not needed
	}
}

// release returns st's request buffer and its share of MaxRequestBytes.
func (c *conn) release(st *stream) {
	if st.msg != nil {
		putBuf(st.msg)
		st.msg = nil
	}
	if st.held > 0 {
		c.mu.Lock()
		c.buffered -= int64(st.held)
		c.mu.Unlock()
	}
	st.held = -1
}

// giveBackLocked returns n bytes of connection window to the peer, in
// batches of a quarter window so that small requests send few updates.
func (c *conn) giveBackLocked(n int) {
	c.recvUnacked += n
	if c.recvUnacked >= int(c.s.o.ConnWindow/4) {
		c.out = appendWindowUpdate(c.out, 0, uint32(c.recvUnacked))
		c.recvUnacked = 0
		c.flushAsyncLocked()
	}
}

// run is a worker running st's method and answering it.
func (c *conn) run(st *stream) {
	if st.group != nil {
		c.runBatch(st.group)
		return
	}
	defer c.calls.Done()
	if st.streaming != nil {
		c.runStream(st)
		return
	}
	ctx := c.ctx
	var cancel context.CancelFunc
	if !st.deadline.IsZero() {
		if ctx, cancel = context.WithDeadline(ctx, st.deadline); ctx.Err() != nil {
			// Past its deadline already: not run, so nothing is counted.
			cancel()
			c.release(st)
			c.finish(st, nil, codes.DeadlineExceeded, expiredMsg)
			return
		}
	}
	out := getBuf(256)
	resp, err := st.method(ctx, (*st.msg)[5:], append((*out)[:0], 0, 0, 0, 0, 0))
	c.release(st)
	answer, code, desc := answerOf(resp, err)
	if cancel != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// The client has given up: whatever the method made of it,
			// the call is over.
			answer, code, desc = nil, codes.DeadlineExceeded, expiredMsg
		}
		cancel()
	}
	c.finish(st, answer, code, desc)
	if cap(resp) > 0 {
		*out = resp[:0]
	}
	putBuf(out)
}

// runBatch is a worker running a batch method for sts and answering them
// in one write.
func (c *conn) runBatch(sts []*stream) {
	defer c.calls.Add(-len(sts))
	run, ctx, cancel, expiry := c.batchDeadlines(c.ctx, sts)
	calls := make([]Call, len(run))
	outs := make([]*[]byte, len(run))
	for i, st := range run {
		outs[i] = getBuf(256)
		calls[i] = Call{In: (*st.msg)[5:], Out: append((*outs[i])[:0], 0, 0, 0, 0, 0)}
	}
	sts[0].serve(ctx, calls) // also with no calls: it was promised them
	cancel()
	for _, st := range sts {
		c.release(st)
	}
	var now time.Time // when the results came, if a call has a deadline
	c.mu.Lock()
	expiry.stopLocked()
	for i, st := range run {
		// Nothing is written until every answer is queued: one write
		// carries them all, unless they pass the output bound.
		for !c.dead && len(c.out) > c.s.o.MaxOutput {
			if c.mayWriteLocked() {
				c.flushLocked(true)
				continue
			}
			c.cond.Wait()
		}
		if st.answered {
			continue
		}
		resp, code, msg := answerOf(calls[i].Out, calls[i].Err)
		if !st.deadline.IsZero() {
			if now.IsZero() {
				now = time.Now()
			}
			if !now.Before(st.deadline) {
				resp, code, msg = nil, codes.DeadlineExceeded, expiredMsg
			}
		}
		c.answerLocked(st, resp, code, msg)
	}
	for _, st := range sts {
		if st.answered {
			c.endLocked(st) // its status went out before
		}
	}
	c.flushLocked(false) // every answer of the batch is queued
	c.mu.Unlock()
	for i, call := range calls {
		if cap(call.Out) > 0 {
			*outs[i] = call.Out[:0]
		}
		putBuf(outs[i])
	}
}

func (c *conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	if err := c.settingsAllowed(); err != nil {
		return err
	}
	// Only the last of each setting counts, so that a frame repeating one
	// costs no more than a frame naming it once.
	window, frame := int64(-1), -1
	if err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			window = int64(s.Val)
		case http2.SettingMaxFrameSize:
			frame = int(s.Val) // Valid checked its range
		}
		return nil
	}); err != nil {
		var ce http2.ConnectionError
		if errors.As(err, &ce) {
			return connError{http2.ErrCode(ce), "bad SETTINGS: " + err.Error()}
		}
		return connError{http2.ErrCodeProtocol, err.Error()}
	}
	if window > maxWindow {
		return connError{http2.ErrCodeFlowControl, "initial window size too large"}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if window >= 0 {
		delta := window - c.peerInitWindow
		c.peerInitWindow = window
		for _, st := range c.live {
			if st.sendWindow+delta > maxWindow {
				return connError{http2.ErrCodeFlowControl, "a stream window passes 2^31-1"}
			}
			st.sendWindow += delta
		}
	}
	if frame > 0 {
		c.peerMaxFrame = frame
	}
	c.out = appendSettingsAck(c.out)
	c.sendBlockedLocked()
	c.flushAsyncLocked()
	return nil
}

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		if c.connSendWindow+inc > maxWindow {
			return connError{http2.ErrCodeFlowControl, "connection window overflow"}
		}
		c.connSendWindow += inc
	} else if st := c.live[f.StreamID]; st != nil {
		if st.sendWindow+inc > maxWindow {
			c.resets.add(st.id, int(c.s.o.MaxConcurrentStreams))
			c.out = appendRSTStream(c.out, st.id, http2.ErrCodeFlowControl)
			c.resetLocked(st)
		} else {
			st.sendWindow += inc
		}
	}
	c.sendBlockedLocked()
	c.flushAsyncLocked()
	return nil
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
	c.mu.Unlock()
	c.resets.forget(id)
	if st == nil {
		return
	}
	receiving := !st.remoteDone && st.served() && st.held >= 0
	st.remoteDone = true
	if receiving {
		c.release(st)
		c.mu.Lock()
		c.endLocked(st)
		c.mu.Unlock()
	}
}

// resetLocked marks st reset: its answer is dropped, and a streaming
// call's context ends (and a send waiting for room gives up).
func (c *conn) resetLocked(st *stream) {
	st.reset = true
	if st.cancel != nil {
		st.cancel()
		c.cond.Broadcast()
	}
}

// goAway sends a last GOAWAY before the connection closes on an error.
func (c *conn) goAway(code http2.ErrCode, msg string) {
	c.sentGoAway = true
	c.mu.Lock()
	c.out = appendGoAway(c.out, c.lastID, code, []byte(msg))
	// A write in progress would leave the GOAWAY behind for a connection
	// about to close: wait for it, then write what is left ourselves.
	for c.writing && !c.dead {
		c.cond.Wait()
	}
	c.flushLocked(true)
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
	c.flushAsyncLocked()
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
			c.flushAsyncLocked()
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

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func getBuf(n int) *[]byte {
	b := bufPool.Get().(*[]byte)
	if cap(*b) < n {
		*b = make([]byte, 0, n)
	}
	*b = (*b)[:0]
	return b
}

// putBuf keeps buffers up to 64 KiB; larger ones were for rare big
// messages and would pin memory.
func putBuf(b *[]byte) {
	if cap(*b) <= 64<<10 {
		bufPool.Put(b)
	}
}
