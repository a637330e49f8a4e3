package h2grpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/netx"
)

// Method serves one unary gRPC method: req is the request message (valid
// only during the call), and the response message is appended to out. A
// non-nil error becomes the call's status: grpc-go status errors keep their
// code and message, anything else is Unknown.
type Method func(ctx context.Context, req []byte, out []byte) ([]byte, error)

// StreamMethod serves one server-streaming gRPC method: req is the request
// message (valid only until the first send), send writes one response
// message (it may be reused once send returns), waiting while the
// connection's output is over MaxOutput, and fails once the call is over
// for the client or ctx ends. ctx ends when the client resets the stream,
// the connection closes, the call's deadline passes, or the connection
// drains (then context.Cause(ctx) is ErrDraining, which send returns); the
// returned error is the call's status, as for Method.
type StreamMethod func(ctx context.Context, req []byte, send func(msg []byte) error) error

// BidiMethod serves one client- or bidirectional-streaming gRPC method on a
// goroutine of its own. recv returns the next request message, read-only
// and valid until the next recv; io.EOF once the client has ended its side
// (the method may still send); and an error once the stream is reset, the
// connection closes or ctx ends. A request message that cannot be read
// (larger than MaxRecvMsgSize, badly coded, cut short by the end of the
// stream) fails the call: recv returns its status, ctx ends, and that is the
// call's status whatever the method returns. send is as for StreamMethod.
// recv and send may be called from two goroutines, each not concurrently
// with itself, and neither after the method returns.
//
// The client may send ahead of the method by one stream window
// (MaxRecvMsgSize+5 bytes, the window every stream is granted); it is
// given back as recv takes messages, so a method that reads slowly slows
// its client down, not the connection's other calls.
//
// ctx ends as a StreamMethod's does; on a drain (GracefulStop,
// MaxConnectionAge) recv and send return ErrDraining, so a method that
// returns their error tells its client to call again elsewhere. The
// returned error is the call's status, as for Method; if the client is
// still sending, the rest of its stream is discarded.
type BidiMethod func(ctx context.Context, recv func() ([]byte, error), send func(msg []byte) error) error

// ErrDraining is the cause of a streaming call's context ending because its
// connection drains (GracefulStop or MaxConnectionAge): once the drain's
// last GOAWAY is out, no stream is waited for. As a status it is
// UNAVAILABLE, which tells a client to call again, on another connection.
var ErrDraining = status.Error(codes.Unavailable, "h2grpc: the server is draining the connection")

// A Call is one unary call of a batch. In is its request message, valid
// until the BatchServe returns. Out holds a buffer with 5 bytes reserved,
// as Method's out, and receives the answer as Method would return it; or
// Err receives the call's error, as Method's.
type Call struct {
	In  []byte
	Out []byte
	Err error
}

// A BatchMethod serves calls of one method that were read together from one
// connection (a batch), as its Method would serve each: what serves them
// may do once what it would do per call (the rate limit service sends
// their counter operations in one go). The connection's reader calls it as
// it dispatches the batch, before the batch waits for a worker and before
// its calls are decoded, so that what serves the batch can get ready (the
// rate limit service holds its backend calls for the batch from here);
// the BatchServe it returns is then called exactly once, on a worker.
type BatchMethod func() BatchServe

// A BatchServe serves one batch on one goroutine. ctx ends when the
// connection closes or when the last of the calls' deadlines passes (none
// if one has none). A call already past its deadline is not among calls
// (which may then be empty); one whose deadline passes while the batch
// runs is answered DEADLINE_EXCEEDED then, and its result dropped. The
// other answers are written together once it returns.
type BatchServe func(ctx context.Context, calls []Call)

// Options configure a Server. The zero value of each field takes its
// default (see EnsureDefaults).
type Options struct {
	// Methods maps a full method name ("/package.Service/Method") to its
	// handler. Calls to other names are answered Unimplemented.
	Methods map[string]Method
	// StreamMethods are the server-streaming methods, by full name.
	StreamMethods map[string]StreamMethod
	// BidiMethods are the client- and bidirectional-streaming methods, by
	// full name.
	BidiMethods map[string]BidiMethod
	// MaxConcurrentStreams bounds the calls of one connection that are open
	// or still running (default 1024). Streams over it are refused.
	MaxConcurrentStreams uint32
	// MaxRecvMsgSize bounds a request message (default 4 MiB, as grpc-go).
	MaxRecvMsgSize int
	// MaxHeaderListSize bounds a request's decoded header list (default
	// 64 KiB).
	MaxHeaderListSize uint32
	// ConnWindow is the connection flow-control window we grant (default
	// 8 MiB); it is given back as bytes arrive.
	ConnWindow uint32
	// MaxRequestBytes bounds the request bytes one connection holds, being
	// received or served (default 64 MiB); a request that would pass it is
	// answered ResourceExhausted. It must hold one MaxRecvMsgSize request.
	MaxRequestBytes int
	// WriteTimeout is how long one write to a connection may take before
	// the connection is closed (default 20 s): a peer that stops reading
	// frees what waited to write to it.
	WriteTimeout time.Duration
	// MaxOutput is how much answer data a connection may buffer before
	// its methods wait for the peer to read (default 4 MiB).
	MaxOutput int
	// Workers is how many goroutines are kept to run methods (0: none); a
	// call that finds none free gets a goroutine of its own.
	Workers int
	// StartGate is what streaming calls start through (gate.go; default
	// NewDefaultStartGate()).
	StartGate *StartGate
	// MaxConnectionAge, if set, makes a connection drain (GOAWAY) after
	// about this long (±10%), and close MaxConnectionAgeGrace later.
	MaxConnectionAge      time.Duration
	MaxConnectionAgeGrace time.Duration
	// HandshakeTimeout bounds how long a new connection may take to send
	// its preface and first SETTINGS (default 120 s, grpc-go's connection
	// timeout), so that silent connections do not pile up.
	HandshakeTimeout time.Duration
	// IdleTimeout drains (GOAWAY) and closes a connection that has had no
	// stream for this long (default 5 min), as grpc-go's MaxConnectionIdle.
	IdleTimeout time.Duration
	// StallTimeout answers DEADLINE_EXCEEDED, and resets, a stream whose
	// request message has not arrived this long after its headers (for a
	// client- or bidirectional-streaming call, its first message; default
	// 30 s). Both are acted on between once and 1.5 times their length
	// (idle.go).
	StallTimeout time.Duration
	// Batches are the unary methods, by full name, that may serve calls
	// read together as one batch; each must also be in Methods, which
	// serves a call read alone.
	Batches map[string]BatchMethod
	// FramesPerRead bounds the frames read while calls (or a PING
	// acknowledgement) wait for the end of a read, and so the calls of
	// one batch: the first of them waits for the reader to reach the
	// last (default 64).
	FramesPerRead int
	// WriteYieldBelow: a writer with less than this much output queued
	// yields once before it writes, so that answers other workers are
	// about to queue (those of one backend call become ready together)
	// leave in the same write (default 4 KiB; negative: never). A batch's
	// answers, queued all at once, are written without it.
	WriteYieldBelow int
	// Floods bound the PING and SETTINGS frames a connection may send
	// (see FloodLimits for the defaults).
	Floods FloodLimits
	// Log receives connection errors at debug level (default: discarded).
	Log *slog.Logger
}

// EnsureDefaults fills the zero fields with their defaults.
func (o *Options) EnsureDefaults() *Options {
	if o.MaxConcurrentStreams == 0 {
		o.MaxConcurrentStreams = 1024
	}
	if o.MaxRecvMsgSize == 0 {
		o.MaxRecvMsgSize = 4 << 20
	}
	if o.MaxHeaderListSize == 0 {
		o.MaxHeaderListSize = 64 << 10
	}
	if o.ConnWindow == 0 {
		o.ConnWindow = 8 << 20
	}
	if o.MaxRequestBytes == 0 {
		o.MaxRequestBytes = max(64<<20, o.MaxRecvMsgSize+5)
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = 20 * time.Second
	}
	if o.MaxOutput == 0 {
		o.MaxOutput = 4 << 20
	}
	if o.FramesPerRead == 0 {
		o.FramesPerRead = 64
	}
	if o.WriteYieldBelow == 0 {
		o.WriteYieldBelow = 4 << 10
	}
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = 120 * time.Second
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 5 * time.Minute
	}
	if o.StallTimeout == 0 {
		o.StallTimeout = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.StartGate == nil {
		o.StartGate = NewDefaultStartGate()
	}
	o.Floods.ensureDefaults()
	return o
}

// Validate reports settings that cannot work.
func (o *Options) Validate() error {
	switch {
	case o.MaxRecvMsgSize < 0 || o.MaxOutput < 0 || o.Workers < 0:
		return fmt.Errorf("h2grpc: message size (%d), output bound (%d) and workers (%d) must not be negative", o.MaxRecvMsgSize, o.MaxOutput, o.Workers)
	case o.ConnWindow != 0 && (o.ConnWindow < 1<<16 || o.ConnWindow > maxWindow):
		return fmt.Errorf("h2grpc: connection window %d is outside [65536, %d]", o.ConnWindow, maxWindow)
	case bothKinds(o) != "":
		return fmt.Errorf("h2grpc: %s is a method of two kinds (unary, server-streaming, bidirectional)", bothKinds(o))
	case batchOnly(o) != "":
		return fmt.Errorf("h2grpc: batch method %s is not a unary method", batchOnly(o))
	case o.MaxRecvMsgSize > maxWindow-5:
		return fmt.Errorf("h2grpc: message size limit %d passes the largest HTTP/2 window", o.MaxRecvMsgSize)
	case o.MaxRequestBytes < 0 || o.MaxRequestBytes > 0 && o.MaxRequestBytes < o.MaxRecvMsgSize+5:
		return fmt.Errorf("h2grpc: request bytes per connection (%d) must hold one message of the size limit (%d)", o.MaxRequestBytes, o.MaxRecvMsgSize)
	case o.WriteTimeout < 0:
		return fmt.Errorf("h2grpc: write timeout %v must not be negative", o.WriteTimeout)
	case o.Floods.PingBurst < 0 || o.Floods.SettingsBurst < 0 || o.Floods.Interval < 0:
		return fmt.Errorf("h2grpc: flood limits (PING burst %d, SETTINGS burst %d, interval %v) must not be negative", o.Floods.PingBurst, o.Floods.SettingsBurst, o.Floods.Interval)
	case o.MaxConnectionAge < 0 || o.MaxConnectionAgeGrace < 0 || o.HandshakeTimeout < 0:
		return fmt.Errorf("h2grpc: connection age (%v), grace (%v) and handshake timeout (%v) must not be negative", o.MaxConnectionAge, o.MaxConnectionAgeGrace, o.HandshakeTimeout)
	case o.IdleTimeout < 0 || o.StallTimeout < 0:
		return fmt.Errorf("h2grpc: idle (%v) and stall (%v) timeouts must not be negative", o.IdleTimeout, o.StallTimeout)
	}
	return nil
}

func bothKinds(o *Options) string {
	for name := range o.StreamMethods {
		if _, ok := o.Methods[name]; ok {
			return name
		}
	}
	for name := range o.BidiMethods {
		_, unary := o.Methods[name]
		_, stream := o.StreamMethods[name]
		if unary || stream {
			return name
		}
	}
	return ""
}

func batchOnly(o *Options) string {
	for name := range o.Batches {
		if _, ok := o.Methods[name]; !ok {
			return name
		}
	}
	return ""
}

// ErrServerStopped is what Serve returns once the server is stopping.
var ErrServerStopped = errors.New("h2grpc: server stopped")

// Server serves the Options' methods on the listeners given to Serve.
type Server struct {
	o    Options
	work chan *stream
	// gate bounds the streaming calls starting at once (gate.go).
	gate *StartGate

	mu       sync.Mutex
	lns      map[net.Listener]struct{}
	conns    map[*conn]struct{}
	stopping bool
	connWG   sync.WaitGroup // one per connection goroutine set
	workerWG sync.WaitGroup
	started  bool
}

// NewServer makes a server; it starts nothing until Serve.
func NewServer(o Options) (*Server, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return &Server{
		o:     o,
		work:  make(chan *stream),
		gate:  o.StartGate,
		lns:   map[net.Listener]struct{}{},
		conns: map[*conn]struct{}{},
	}, nil
}

// Serve accepts connections on ln until Stop or GracefulStop, and then
// returns ErrServerStopped; any other accept failure is returned as is.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		ln.Close()
		return ErrServerStopped
	}
	if !s.started {
		s.started = true
		s.workerWG.Add(s.o.Workers)
		for range s.o.Workers {
			go s.worker()
		}
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			stopping := s.stopping
			s.mu.Unlock()
			if stopping {
				return ErrServerStopped
			}
			if netx.Retryable(err) {
				// Out of file descriptors (EMFILE, which is no
				// Timeout) and the like: back off as net/http does
				// instead of spinning or stopping.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		if !s.track(nc) {
			nc.Close()
			return ErrServerStopped
		}
	}
}

// track starts serving nc unless the server is stopping.
func (s *Server) track(nc net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	c := newConn(s, nc)
	s.conns[c] = struct{}{}
	c.startWatch()
	if s.o.MaxConnectionAge > 0 {
		age := s.o.MaxConnectionAge
		age += time.Duration(rand.Int64N(int64(age)/5+1)) - age/10
		c.ageTimer = time.AfterFunc(age, func() { c.drain(s.o.MaxConnectionAgeGrace) })
	}
	s.connWG.Add(1)
	go func() {
		defer s.connWG.Done()
		c.serve()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	return true
}

// worker runs methods handed over by readers; long-lived so that the stack
// a decision grows is kept.
func (s *Server) worker() {
	defer s.workerWG.Done()
	for st := range s.work {
		st.c.run(st)
	}
}

// dispatch runs st's method on a free worker or a goroutine of its own.
func (s *Server) dispatch(st *stream) {
	if st.streaming != nil || st.bidi != nil {
		// A stream may last as long as its connection: it would take a
		// worker from the unary calls the pool is kept for. It starts
		// when the gate lets it.
		s.gate.start(func(p *Pass) {
			st.pass.Store(p)
			go st.c.run(st)
		})
		return
	}
	select {
	case s.work <- st:
	default:
		go st.c.run(st)
	}
}

// closeListeners stops accepting; it reports whether this call began the
// stop.
func (s *Server) closeListeners() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	s.stopping = true
	for ln := range s.lns {
		ln.Close()
	}
	return true
}

func (s *Server) connList() []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		cs = append(cs, c)
	}
	return cs
}

// GracefulStop stops accepting, tells every connection to go away, and
// returns once their calls are answered and they are closed.
func (s *Server) GracefulStop() {
	first := s.closeListeners()
	for _, c := range s.connList() {
		c.drain(0)
	}
	s.connWG.Wait()
	if first {
		s.stopWorkers()
	}
}

// Stop closes every listener and connection at once; calls still running
// see their context cancelled and their answers dropped.
func (s *Server) Stop() {
	first := s.closeListeners()
	for _, c := range s.connList() {
		c.close(errors.New("server stopped"))
	}
	s.connWG.Wait()
	if first {
		s.stopWorkers()
	}
}

// stopWorkers ends the worker pool once no reader can dispatch any more.
func (s *Server) stopWorkers() {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if started {
		close(s.work)
		s.workerWG.Wait()
	}
}

// TLSConfig is base set up to offer HTTP/2 by ALPN, also in the configs its
// GetConfigForClient returns (certificate reloading works that way): gRPC
// clients refuse a TLS server that does not negotiate "h2".
func TLSConfig(base *tls.Config) *tls.Config {
	c := base.Clone()
	c.NextProtos = withH2(c.NextProtos)
	if get := c.GetConfigForClient; get != nil {
		c.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
			cfg, err := get(hi)
			if cfg != nil && !slices.Contains(cfg.NextProtos, "h2") {
				cfg = cfg.Clone()
				cfg.NextProtos = withH2(cfg.NextProtos)
			}
			return cfg, err
		}
	}
	return c
}

func withH2(protos []string) []string {
	if slices.Contains(protos, "h2") {
		return protos
	}
	return append([]string{"h2"}, protos...)
}
