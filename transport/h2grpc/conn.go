package h2grpc

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
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
	c *conn
	// pass is a streaming call's slot in the start gate, until it has
	// started (started).
	pass   atomic.Pointer[Pass]
	id     uint32
	method Method
	// deadline is when the grpc-timeout header, counted from the
	// request's headers, runs out; zero without one.
	deadline time.Time
	// msg collects the request's DATA; charged is its size, counted in the
	// connection's buffered bytes until the method is done (-1: released).
	msg     *[]byte
	charged int
	// recvd counts DATA bytes against the stream window we granted.
	recvd int64
	// contentLength is the request's content-length, or -1.
	contentLength int64
	// remoteDone: the peer ended the stream (END_STREAM) or reset it.
	remoteDone bool
	// gzip: the request's grpc-encoding is gzip; coded: it named one, and
	// the answer tells which we accept (grpc-accept-encoding).
	gzip, coded bool
	// dispatched: the request is complete and a worker owns the stream's
	// answer (a bidirectional call's goroutine owns it from the headers
	// on; the reader still fills its inbox).
	dispatched bool
	// streaming is the method of a server-streaming call, bidi that of a
	// client- or bidirectional-streaming one (method is nil); in is what
	// the latter has received (bidi.go).
	streaming StreamMethod
	bidi      BidiMethod
	in        *inbox
	// batch and path: the method may serve calls read together
	// (Options.Batches). group is the calls of a batch, this one first,
	// on the stream a worker is given, and serve what the batch method
	// returned for them when they were dispatched.
	batch BatchMethod
	path  string
	group []*stream
	serve BatchServe

	// mu: flow control of our DATA and the stream's end.
	sendWindow int64                   // the peer's stream window updates minus what we sent, plus its initial window at creation
	reset      bool                    // the peer reset the stream: drop what is left
	done       bool                    // our END_STREAM is written or dropped
	pending    []byte                  // DATA payload waiting for window
	trailer    []byte                  // trailers block to send after pending; nil while a stream's method runs
	headerSent bool                    // a streaming call's response HEADERS went out
	cancel     context.CancelCauseFunc // a streaming call's context, once its method runs
	cause      error                   // why its context is to end, if that came before it ran
	answered   bool                    // a batch call's status went out while its batch runs (deadline)
	rstAfter   bool                    // RST_STREAM(NO_ERROR) follows the answer: the request is still coming
	// waiting: the request message has not arrived since watch tick
	// waitTick (idle.go).
	waiting  bool
	waitTick uint32
}

func (st *stream) served() bool { return st.method != nil || st.streaming != nil || st.bidi != nil }

// conn is one HTTP/2 connection.
type conn struct {
	s  *Server
	nc net.Conn

	ctx    context.Context // cancelled when the connection closes
	cancel context.CancelFunc

	ageTimer *time.Timer
	calls    sync.WaitGroup // methods running
	writers  sync.WaitGroup // the writer (writeLoop) and an idle drain's close

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
	flood       floodGuard

	mu   sync.Mutex
	cond sync.Cond // output drained below MaxOutput, or the connection died
	// wcond wakes the writer: there is output (flushLocked), or the
	// connection died.
	wcond sync.Cond
	out   []byte // frames to write
	// spare is the buffer the writer gives back, reused for out.
	spare   []byte
	writing bool
	// whole: the output queued is all its callers had; the writer need not
	// wait for more (flushWholeLocked).
	whole bool
	dead  bool
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
	resets   ourResets // streams we reset while their request was coming
	// Peer settings that shape what we send.
	peerInitWindow int64
	peerMaxFrame   int
	connSendWindow int64
	// answers counts the answers and DATA frames queued, for the PING
	// flood guard.
	answers uint64
	// draining: a GOAWAY went out; new streams are refused and the
	// connection closes once live is empty.
	started  bool // our SETTINGS are queued: frames may follow them
	draining bool
	phase2   bool          // the GOAWAY naming the last stream went out
	drainAck chan struct{} // closed when the drain's PING is answered
	acks     acks          // the Acker's PINGs
	closed   chan struct{}
	// watch: idle and stalled-stream bookkeeping (idle.go); stalled are
	// the streams it answered while the reader owned them, whose request
	// bytes the reader releases (stallDue says there are some).
	watch    watch
	stalled  []*stream
	stallDue atomic.Bool
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
	c.wcond.L = &c.mu
	return c
}

// serve reads the connection until it ends, then waits for its methods.
func (c *conn) serve() {
	c.writers.Add(1)
	go c.writeLoop()
	err := c.read()
	if c.sentGoAway {
		c.linger()
	}
	c.close(err)
	c.calls.Wait()
	c.writers.Wait()
	c.stopWatch()
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
	c.wcond.Broadcast()
	c.failAcksLocked()
	c.mu.Unlock()
	c.cancel()
	c.nc.Close()
	close(c.closed)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		c.s.o.Log.Debug("gRPC connection closed", "remote", c.nc.RemoteAddr().String(), "error", err)
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
