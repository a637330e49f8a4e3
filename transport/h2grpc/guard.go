package h2grpc

// Guard: limits of this package's server for the connections of another
// HTTP/2 server (grpc-go's), which does not keep them itself. The guard
// sits between that server and the socket (or TLS) and follows the frame
// boundaries both ways, reading nothing but frame headers:
//
//   - SETTINGS floods: grpc-go answers every SETTINGS frame and counts none
//     (its PINGs it does count: keepalive.EnforcementPolicy). The guard
//     keeps the native server's budget (FloodLimits.SettingsBurst, one back
//     per Interval); past it the peer gets GOAWAY ENHANCE_YOUR_CALM, when
//     no frame of the server's is half written, and the connection ends.
//   - Answers the peer does not read: grpc-go retires a stream from its
//     MaxConcurrentStreams count once the answer is queued, not written,
//     and keeps reading requests, so a peer that never reads makes it
//     queue answers without end (hundreds of MB in seconds). The guard
//     counts the streams the peer opened whose end (END_STREAM or
//     RST_STREAM, either way) is not on the wire yet, and stops reading
//     while there are MaxOpenStreams of them: what is queued stays below
//     that many streams' answers. A compliant client never meets it (it
//     keeps to the server's SETTINGS_MAX_CONCURRENT_STREAMS, which counts
//     a stream until it has read the end); a peer that holds it, or a
//     write, for WriteTimeout is cut off.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// GuardOptions configure Guard. The zero value of each field takes its
// default.
type GuardOptions struct {
	// MaxOpenStreams bounds the streams whose end is not written yet
	// before the peer is no longer read (default 2048: twice the native
	// server's stream limit).
	MaxOpenStreams int
	// WriteTimeout bounds one write, and how long reading may wait for
	// open streams to end (default 20 s, as Options.WriteTimeout).
	WriteTimeout time.Duration
	// Floods: SettingsBurst and Interval are used.
	Floods FloodLimits
}

func (o *GuardOptions) ensureDefaults() {
	if o.MaxOpenStreams <= 0 {
		o.MaxOpenStreams = 2048
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 20 * time.Second
	}
	o.Floods.ensureDefaults()
}

// ErrGuardCutOff is what Read returns once the guard has cut a peer off.
var ErrGuardCutOff = errors.New("h2grpc: guard cut the connection off")

// GuardListener guards every connection ln accepts.
func GuardListener(ln net.Listener, o GuardOptions) net.Listener {
	o.ensureDefaults()
	return &guardListener{Listener: ln, o: o}
}

type guardListener struct {
	net.Listener
	o GuardOptions
}

func (l *guardListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Guard(nc, l.o), nil
}

// Guard guards nc, the server's side of a connection whose first bytes
// are the client preface. If they are not (TLS the guard cannot read), it
// only bounds writes.
func Guard(nc net.Conn, o GuardOptions) net.Conn {
	o.ensureDefaults()
	g := &guardConn{Conn: nc, o: o, preface: len(clientPreface), open: map[uint32]struct{}{}}
	g.cond.L = &g.mu
	return g
}

// frameScan follows frame boundaries in a byte stream.
type frameScan struct {
	hdr  [9]byte
	n    int // header bytes so far
	skip int // payload bytes still to pass
}

// feed takes bytes of p until a frame header is complete: it returns how
// many it took and whether hdr holds a new header.
func (s *frameScan) feed(p []byte) (int, bool) {
	if s.skip > 0 {
		k := min(s.skip, len(p))
		s.skip -= k
		return k, false
	}
	k := copy(s.hdr[s.n:], p)
	if s.n += k; s.n < len(s.hdr) {
		return k, false
	}
	s.n = 0
	s.skip = int(s.hdr[0])<<16 | int(s.hdr[1])<<8 | int(s.hdr[2])
	return k, true
}

func (s *frameScan) kind() http2.FrameType { return http2.FrameType(s.hdr[3]) }
func (s *frameScan) flags() http2.Flags    { return http2.Flags(s.hdr[4]) }
func (s *frameScan) id() uint32            { return binary.BigEndian.Uint32(s.hdr[5:]) & maxStreamID }
func (s *frameScan) boundary() bool        { return s.n == 0 && s.skip == 0 }

type guardConn struct {
	net.Conn
	o GuardOptions

	// The reader's (one goroutine reads, as HTTP/2 servers do).
	in       frameScan
	preface  int // client preface bytes still to match; -1: not HTTP/2
	settings budget

	wmu  sync.Mutex
	out  frameScan // wmu
	ends []uint32  // wmu: scratch

	mu     sync.Mutex
	cond   sync.Cond // an open stream ended, or the connection closed
	open   map[uint32]struct{}
	lastID uint32
	closed bool
}

func (g *guardConn) Read(p []byte) (int, error) {
	if g.preface < 0 {
		return g.Conn.Read(p)
	}
	if err := g.waitRoom(); err != nil {
		return 0, err
	}
	n, err := g.Conn.Read(p)
	if ferr := g.inspect(p[:n]); ferr != nil {
		g.cutOff(ferr.Error())
		return 0, fmt.Errorf("%w: %w", ErrGuardCutOff, ferr)
	}
	return n, err
}

// waitRoom waits while MaxOpenStreams streams are open, WriteTimeout at
// most.
func (g *guardConn) waitRoom() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.open) < g.o.MaxOpenStreams || g.closed {
		return nil
	}
	until := time.Now().Add(g.o.WriteTimeout)
	t := time.AfterFunc(g.o.WriteTimeout, func() {
		g.mu.Lock()
		g.cond.Broadcast()
		g.mu.Unlock()
	})
	defer t.Stop()
	for len(g.open) >= g.o.MaxOpenStreams && !g.closed {
		if !time.Now().Before(until) {
			g.closed = true
			g.Conn.Close()
			return fmt.Errorf("%w: %d streams not ended for %v (a peer that does not read)", ErrGuardCutOff, len(g.open), g.o.WriteTimeout)
		}
		g.cond.Wait()
	}
	return nil
}

// inspect follows what the peer sent: streams it opens or resets, and
// its SETTINGS frames, which must keep to their budget.
func (g *guardConn) inspect(b []byte) error {
	if g.preface > 0 {
		k := min(g.preface, len(b))
		at := len(clientPreface) - g.preface
		if !bytes.Equal(b[:k], clientPreface[at:at+k]) {
			g.preface = -1
			return nil
		}
		g.preface -= k
		b = b[k:]
	}
	for len(b) > 0 {
		k, ok := g.in.feed(b)
		b = b[k:]
		if !ok {
			continue
		}
		switch id := g.in.id(); g.in.kind() {
		case http2.FrameSettings:
			l := &g.o.Floods
			if g.in.flags()&http2.FlagSettingsAck == 0 && !g.settings.take(time.Now(), l.Interval, l.SettingsBurst) {
				return errors.New("too many SETTINGS")
			}
		case http2.FrameHeaders:
			g.mu.Lock()
			if id%2 == 1 && id > g.lastID {
				g.lastID = id
				g.open[id] = struct{}{}
			}
			g.mu.Unlock()
		case http2.FrameRSTStream:
			g.ended([]uint32{id})
		}
	}
	return nil
}

// ended forgets streams whose end went either way.
func (g *guardConn) ended(ids []uint32) {
	g.mu.Lock()
	for _, id := range ids {
		delete(g.open, id)
	}
	g.cond.Broadcast()
	g.mu.Unlock()
}

func (g *guardConn) Write(p []byte) (int, error) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	_ = g.Conn.SetWriteDeadline(time.Now().Add(g.o.WriteTimeout))
	n, err := g.Conn.Write(p)
	g.ends = g.ends[:0]
	for b := p[:n]; len(b) > 0; {
		k, ok := g.out.feed(b)
		b = b[k:]
		if !ok {
			continue
		}
		switch g.out.kind() {
		case http2.FrameHeaders, http2.FrameData:
			if g.out.flags()&http2.FlagHeadersEndStream != 0 {
				g.ends = append(g.ends, g.out.id())
			}
		case http2.FrameRSTStream:
			g.ends = append(g.ends, g.out.id())
		}
	}
	if len(g.ends) > 0 {
		g.ended(g.ends)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		g.Close() // the reader stops too
	}
	return n, err
}

// cutOff tells the peer why with GOAWAY ENHANCE_YOUR_CALM, if no write is
// in progress and none is half done, and closes the connection.
func (g *guardConn) cutOff(why string) {
	if g.wmu.TryLock() {
		if g.out.boundary() {
			g.mu.Lock()
			last := g.lastID
			g.mu.Unlock()
			_ = g.Conn.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = g.Conn.Write(appendGoAway(nil, last, http2.ErrCodeEnhanceYourCalm, []byte(why)))
		}
		g.wmu.Unlock()
	}
	g.Close()
}

func (g *guardConn) Close() error {
	g.mu.Lock()
	g.closed = true
	g.cond.Broadcast()
	g.mu.Unlock()
	return g.Conn.Close()
}
