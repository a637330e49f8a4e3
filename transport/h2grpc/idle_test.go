package h2grpc

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestTicks: a timeout acted on by ticks is never early, and late by at
// most two ticks.
func TestTicks(t *testing.T) {
	for _, c := range []struct{ d, every time.Duration }{{time.Second, 250 * time.Millisecond}, {30 * time.Second, 75 * time.Second / 10}, {5 * time.Minute, 7500 * time.Millisecond}, {time.Second, 300 * time.Millisecond}} {
		n := ticks(c.d, c.every)
		// A stream that began just before a tick waits n-1 whole ticks at
		// least; one that began just after one, n at most.
		if early, late := time.Duration(n-1)*c.every, time.Duration(n)*c.every; early < c.d || late > c.d+2*c.every {
			t.Errorf("ticks(%v, %v) = %d: acted on between %v and %v", c.d, c.every, n, early, late)
		}
	}
}

// readUntilClosed reads r's frames until the connection ends, and
// returns the GOAWAY it got, if any. It fails if the connection is still
// open after bound.
func readUntilClosed(t *testing.T, r *raw, bound time.Duration) *http2.GoAwayFrame {
	t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(bound))
	var g *http2.GoAwayFrame
	for {
		f, err := r.fr.ReadFrame()
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			t.Fatalf("the connection is still open after %v", bound)
		case err != nil:
			return g
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			g = f
		case *http2.PingFrame:
			if !f.IsAck() { // the drain's PING: answered, as a client does
				r.fr.WritePing(true, f.Data)
			}
		}
	}
}

// TestIdleConnectionClosed: a connection with no stream after the
// handshake, or after its last call, gets GOAWAY and is closed after about
// IdleTimeout; one with a call in progress is not.
func TestIdleConnectionClosed(t *testing.T) {
	const idle = 300 * time.Millisecond
	block := make(chan struct{})
	slow := func(ctx context.Context, req, out []byte) ([]byte, error) {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return append(out, req...), nil
	}
	_, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Echo": echo, "/t.S/Slow": slow}, IdleTimeout: idle, StallTimeout: time.Hour})
	t.Run("after the handshake", func(t *testing.T) {
		r := dialSettled(t, addr)
		start := time.Now()
		if g := readUntilClosed(t, r, 20*time.Second); g == nil || g.ErrCode != http2.ErrCodeNo {
			t.Fatalf("closed without GOAWAY NO_ERROR (%v)", g)
		}
		if d := time.Since(start); d < idle {
			t.Errorf("closed after %v, before the idle timeout %v", d, idle)
		}
	})
	t.Run("after a call", func(t *testing.T) {
		r := dialSettled(t, addr)
		r.headers(1, "/t.S/Echo", false)
		r.message(1, []byte("x"))
		answers(t, r, 1)
		if g := readUntilClosed(t, r, 20*time.Second); g == nil {
			t.Fatal("closed without GOAWAY")
		}
	})
	t.Run("not while a call runs", func(t *testing.T) {
		r := dialSettled(t, addr)
		r.headers(1, "/t.S/Slow", false)
		r.message(1, []byte("x"))
		// Four idle timeouts with a call in progress: still open (a PING
		// round trip says so), then the answer comes once released.
		r.nc.SetReadDeadline(time.Now().Add(4 * idle))
		if f, err := r.fr.ReadFrame(); err == nil {
			t.Fatalf("%v while the call runs", f)
		} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			t.Fatalf("connection ended while a call ran: %v", err)
		}
		r.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		close(block)
		answers(t, r, 1)
	})
}

// TestStalledStreams: a stream that sent only its headers, or part of its
// message, is answered DEADLINE_EXCEEDED and reset after about
// StallTimeout, unary and bidirectional alike; the connection and its
// other calls go on, and the request bytes held are released.
func TestStalledStreams(t *testing.T) {
	const stall = 300 * time.Millisecond
	bidiStarted := make(chan struct{}, 1)
	var bidiErr = make(chan error, 1)
	bidi := func(ctx context.Context, recv func() ([]byte, error), send func([]byte) error) error {
		bidiStarted <- struct{}{}
		_, err := recv()
		bidiErr <- err
		return err
	}
	s, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Echo": echo}, BidiMethods: map[string]BidiMethod{"/t.S/Bidi": bidi},
		StallTimeout: stall, IdleTimeout: time.Hour})
	r := dialSettled(t, addr)
	start := time.Now()
	r.headers(1, "/t.S/Echo", false)                                              // headers only
	r.headers(3, "/t.S/Echo", false)                                              // part of a message
	if err := r.fr.WriteData(3, false, []byte{0, 0, 0, 0, 9, 1, 2}); err != nil { // 2 of 9 bytes
		t.Fatal(err)
	}
	r.headers(5, "/t.S/Bidi", false)
	<-bidiStarted
	// The three are answered in whatever order the timer found them.
	got := map[uint32]string{}
	for len(got) < 3 {
		f := r.next(func(f http2.Frame) bool {
			_, ok := f.(*http2.MetaHeadersFrame)
			id := f.Header().StreamID
			return ok && (id == 1 || id == 3 || id == 5)
		})
		got[f.Header().StreamID] = field(f, "grpc-status")
	}
	for id, code := range got {
		if code != "4" {
			t.Errorf("stream %d: grpc-status %q, want 4 (DEADLINE_EXCEEDED)", id, code)
		}
	}
	if d := time.Since(start); d < stall {
		t.Errorf("answered after %v, before the stall timeout %v", d, stall)
	}
	if err := <-bidiErr; status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("the bidirectional method's recv: %v", err)
	}
	// The connection serves on, and what the stalled stream held is back.
	r.headers(7, "/t.S/Echo", false)
	r.message(7, []byte("after"))
	answers(t, r, 7)
	var c *conn
	for _, cc := range s.connList() {
		c = cc
	}
	testenv.Eventually(t, "the stalled request's bytes released", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.buffered == 0
	})
}
