package testenv

import (
	"io"
	"net"
	"sync"
	"time"
)

// LatencyProxy is a TCP proxy on loopback that delays every byte by a fixed
// time in each direction: a store in another zone, for tests and
// benchmarks. Data keeps flowing while earlier data waits out its delay
// (each direction is a queue of timestamped chunks), so a pipelined client
// sees the round trip once, as over a long link, not once per chunk.
type LatencyProxy struct {
	Addr string

	target string
	delay  time.Duration
	ln     net.Listener
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// StartLatencyProxy proxies a loopback listener to target, delaying each
// direction by oneWay; it is closed when the test ends.
func StartLatencyProxy(t TB, target string, oneWay time.Duration) *LatencyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("latency proxy: %v", err)
		return nil
	}
	p := &LatencyProxy{Addr: ln.Addr().String(), target: target, delay: oneWay, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Close stops accepting, cuts every proxied connection and waits for the
// proxy's goroutines.
func (p *LatencyProxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

// track registers c to be cut on Close; false when the proxy is closed.
func (p *LatencyProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *LatencyProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve dials the target for client c and relays both ways until either
// side closes.
func (p *LatencyProxy) serve(c net.Conn) {
	defer p.wg.Done()
	s, err := net.DialTimeout("tcp", p.target, readyTimeout)
	if err != nil || !p.track(s) {
		c.Close()
		return
	}
	var relays sync.WaitGroup
	relays.Add(2)
	go func() { defer relays.Done(); p.relay(s, c) }()
	go func() { defer relays.Done(); p.relay(c, s) }()
	relays.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

// chunk is data read at a time, due for writing delay later.
type chunk struct {
	b   []byte
	due time.Time
}

// relay copies src to dst, each chunk delayed; when either ends, both
// connections are closed, which ends the relay of the other direction too.
func (p *LatencyProxy) relay(dst, src net.Conn) {
	queue := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ch := range queue {
			if d := time.Until(ch.due); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(ch.b); err != nil {
				dst.Close()
				src.Close()
				for range queue { // drain until the reader sees the close
				}
				return
			}
		}
	}()
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			queue <- chunk{b: buf[:n], due: time.Now().Add(p.delay)}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			break
		}
	}
	close(queue)
	<-done
	dst.Close()
	src.Close()
}
