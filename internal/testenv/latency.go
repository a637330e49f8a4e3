package testenv

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// LatencyProxy forwards TCP connections from a loopback port to a target,
// delivering every byte OneWay after it arrived, in each direction, without
// limiting throughput: a store that is far away (another zone, the edge)
// for tests that must not depend on how fast loopback is.
type LatencyProxy struct {
	Addr   string // host:port clients dial
	Target string
	OneWay time.Duration

	ln       net.Listener
	accepted atomic.Int64

	mu     sync.Mutex
	closed bool
	conns  map[*proxyConn]struct{}
	wg     sync.WaitGroup // the accept loop and every connection's goroutines
	done   chan struct{}  // closed by Close: delayed writes stop waiting
}

// maxProxyConns bounds the connections (5 goroutines each) a proxy serves at
// once; more are refused by closing them, as a full server would.
const maxProxyConns = 256

// proxyChunkQueue bounds the chunks in flight per direction (each at most
// proxyChunk bytes): a reader that gets that far ahead of its writer waits.
const (
	proxyChunkQueue = 256
	proxyChunk      = 32 << 10
)

// StartLatencyProxy listens on a free loopback port and forwards to target
// (host:port), adding oneWay in each direction (a round trip of
// 2×oneWay). Cleanup closes it and waits for all its goroutines. A target
// that refuses the dial closes the client's connection, as a dead server
// would.
func StartLatencyProxy(t TB, target string, oneWay time.Duration) *LatencyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: latency proxy: listen: %v", err)
		return nil
	}
	p := &LatencyProxy{Addr: ln.Addr().String(), Target: target, OneWay: oneWay, ln: ln,
		conns: map[*proxyConn]struct{}{}, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Accepted is how many client connections the proxy has accepted so far.
func (p *LatencyProxy) Accepted() int64 { return p.accepted.Load() }

// Close stops accepting, cuts every connection and waits for the proxy's
// goroutines. Calling it twice is fine.
func (p *LatencyProxy) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.done)
		_ = p.ln.Close()
		for c := range p.conns {
			c.cut()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *LatencyProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a client that gave up while queued
		}
		p.accepted.Add(1)
		p.mu.Lock()
		if p.closed || len(p.conns) >= maxProxyConns {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		pc := &proxyConn{client: c}
		p.conns[pc] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(pc)
	}
}

// proxyConn is one client connection and its connection to the target.
type proxyConn struct {
	mu             sync.Mutex
	client, target net.Conn
	cutDone        bool
}

// cut closes both sides; the goroutines of the connection then end.
func (c *proxyConn) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cutDone = true
	_ = c.client.Close()
	if c.target != nil {
		_ = c.target.Close()
	}
}

// serve dials the target and runs both directions until both have ended.
func (p *LatencyProxy) serve(c *proxyConn) {
	defer p.wg.Done()
	defer func() {
		c.cut()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	d := net.Dialer{Timeout: 2 * time.Second}
	target, err := d.Dial("tcp", p.Target)
	if err != nil {
		return
	}
	c.mu.Lock()
	if c.cutDone { // Close came while dialing
		c.mu.Unlock()
		_ = target.Close()
		return
	}
	c.target = target
	c.mu.Unlock()
	for _, conn := range []net.Conn{c.client, target} {
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
	}
	var dirs sync.WaitGroup
	dirs.Add(2)
	go func() { defer dirs.Done(); p.forward(c, target, c.client) }()
	go func() { defer dirs.Done(); p.forward(c, c.client, target) }()
	dirs.Wait()
}

type delayed struct {
	at  time.Time
	buf []byte
}

// forward copies src to dst, each chunk OneWay after it was read. The end
// of src half-closes dst once everything before it is delivered; an error
// on either side cuts the connection.
func (p *LatencyProxy) forward(c *proxyConn, dst, src net.Conn) {
	q := make(chan delayed, proxyChunkQueue)
	var read sync.WaitGroup
	read.Add(1)
	go func() {
		defer read.Done()
		defer close(q)
		buf := make([]byte, proxyChunk)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				q <- delayed{time.Now().Add(p.OneWay), append([]byte(nil), buf[:n]...)}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					c.cut()
				}
				return
			}
		}
	}()
	failed := false
	timer := time.NewTimer(0)
	<-timer.C
	for d := range q {
		if failed {
			continue // drain, so the reader never blocks on a full queue
		}
		if wait := time.Until(d.at); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-p.done:
				timer.Stop()
				failed = true
				continue
			}
		}
		if _, err := dst.Write(d.buf); err != nil {
			failed = true
			c.cut()
		}
	}
	timer.Stop()
	read.Wait()
	if tc, ok := dst.(*net.TCPConn); ok && !failed {
		_ = tc.CloseWrite()
	}
}
