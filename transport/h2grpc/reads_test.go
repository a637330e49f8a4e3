package h2grpc

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluicehq/sluice/internal/testenv"
)

// recordingConn keeps a copy of every write the server makes.
type recordingConn struct {
	net.Conn
	mu     *sync.Mutex
	writes *[][]byte
}

func (c recordingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	*c.writes = append(*c.writes, bytes.Clone(p))
	c.mu.Unlock()
	return c.Conn.Write(p)
}

type recordingListener struct {
	net.Listener
	mu     *sync.Mutex
	writes *[][]byte
}

func (l recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return recordingConn{c, l.mu, l.writes}, nil
}

// dialSettled is dialRaw once both sides' SETTINGS are acknowledged, so
// that what a test sends next is not read together with them (a SETTINGS
// acknowledgement is written at once, with whatever waits).
func dialSettled(t *testing.T, addr string) *raw {
	t.Helper()
	r := dialRaw(t, addr)
	r.next(func(f http2.Frame) bool { sf, ok := f.(*http2.SettingsFrame); return ok && !sf.IsAck() })
	if err := r.fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	r.next(func(f http2.Frame) bool { sf, ok := f.(*http2.SettingsFrame); return ok && sf.IsAck() })
	return r
}

// TestCallsReadTogether: calls that arrive in one read all run, and a PING
// read with them is acknowledged in the write of an answer, not in a write
// of its own.
func TestCallsReadTogether(t *testing.T) {
	started := make(chan struct{}, 3)
	release := make(chan struct{})
	var mu sync.Mutex
	var writes [][]byte
	s, addr := serveOn(t, Options{
		Methods: map[string]Method{"/t.S/Echo": func(ctx context.Context, req, out []byte) ([]byte, error) {
			started <- struct{}{}
			<-release
			return append(out, req...), nil
		}},
	}, func(ln net.Listener) net.Listener { return recordingListener{ln, &mu, &writes} })

	r := dialSettled(t, addr)
	// The writer may still be in the turn that wrote our SETTINGS'
	// acknowledgement (its Write returned, its goroutine not yet run
	// again): that turn goes on to write whatever the reader queued
	// meanwhile, the PING's acknowledgement alone. That is the writer
	// keeping up, not the behaviour under test; a loaded machine made it
	// happen. Once the writer is idle, the next write is one the reader
	// or an answer starts.
	testenv.Eventually(t, "the server's writer idle after the handshake", func() bool { return writerIdle(s) })

	// Three calls and a PING in one write, so that one read gets them.
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	ping := [8]byte{9, 8, 7, 6, 5, 4, 3, 2}
	ids := []uint32{1, 3, 5}
	for _, id := range ids {
		r.hb.Reset()
		saved := r.fr
		r.fr = fr
		r.headers(id, "/t.S/Echo", false)
		r.message(id, []byte{byte(id)})
		r.fr = saved
	}
	if err := fr.WritePing(false, ping); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	before := len(writes)
	mu.Unlock()
	if _, err := r.nc.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	for range ids {
		<-started
	}
	// Every call is running, so the PING has been read. An acknowledgement
	// written on its own would be written now, with nothing to wait for:
	// give it the time to show before the answers can carry it.
	for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); {
		mu.Lock()
		n := len(writes)
		mu.Unlock()
		if n > before {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)

	answered := map[uint32]bool{}
	acked := false
	for len(answered) < len(ids) || !acked {
		switch f := r.next(func(http2.Frame) bool { return true }).(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				answered[f.StreamID] = true
			}
		case *http2.PingFrame:
			acked = f.IsAck() && f.Data == ping
		}
	}

	// The acknowledgement rode with an answer.
	mu.Lock()
	defer mu.Unlock()
	for _, w := range writes[before:] {
		var ack, answer bool
		for _, f := range frames(t, w) {
			switch f.(type) {
			case *http2.PingFrame:
				ack = true
			case *http2.HeadersFrame, *http2.DataFrame:
				answer = true
			}
		}
		if ack && !answer {
			t.Errorf("the PING read with calls was acknowledged in a write of its own (%d bytes)", len(w))
		}
	}
}

// writerIdle reports whether s has one connection and its writer is
// between turns with nothing to write.
func writerIdle(s *Server) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) != 1 {
		return false
	}
	for c := range s.conns {
		c.mu.Lock()
		defer c.mu.Unlock()
		return !c.writing && len(c.out) == 0
	}
	return false
}

// frames parses one recorded write, which must be whole frames.
func frames(t *testing.T, w []byte) []http2.Frame {
	t.Helper()
	var out []http2.Frame
	rd := http2.NewFramer(nil, bytes.NewReader(w))
	for {
		f, err := rd.ReadFrame()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("a write that is not whole frames: %v", err)
		}
		out = append(out, f)
	}
}

func TestFrameBuffered(t *testing.T) {
	t.Parallel()
	frame := func(payload int) []byte {
		b := []byte{byte(payload >> 16), byte(payload >> 8), byte(payload), 0, 0, 0, 0, 0, 1}
		return append(b, make([]byte, payload)...)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want bool
	}{
		{"nothing", nil, false},
		{"part of a header", frame(0)[:5], false},
		{"an empty frame", frame(0), true},
		{"part of a payload", frame(10)[:15], false},
		{"a whole frame", frame(10), true},
		{"a frame and part of the next", append(frame(10), frame(4)[:3]...), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReaderSize(bytes.NewReader(tc.in), 64)
			if len(tc.in) > 0 {
				if _, err := br.Peek(len(tc.in)); err != nil {
					t.Fatal(err)
				}
			}
			if got := frameBuffered(br); got != tc.want {
				t.Fatalf("frameBuffered = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPingFlood: a peer that sends PINGs faster than it reads, with calls
// among them, gets every acknowledgement and every answer, in order, even
// when the acknowledgements pass the connection's output bound.
func TestPingFlood(t *testing.T) {
	const rounds, pings = 10, 2000
	_, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Echo": echo}, MaxOutput: 1024, Floods: FloodLimits{PingBurst: rounds * pings}})
	r := dialRaw(t, addr)
	done := make(chan error, 1)
	go func() {
		// Its own framer and encoder: the test reads r.fr meanwhile.
		var buf, hb bytes.Buffer
		fr := http2.NewFramer(&buf, nil)
		enc := hpack.NewEncoder(&hb)
		for i := range rounds {
			buf.Reset()
			hb.Reset()
			for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/t.S/Echo"}, {":authority", "x"}, {"content-type", "application/grpc"}} {
				enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			id := uint32(2*i + 1)
			err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true})
			if err == nil {
				err = fr.WriteData(id, true, []byte{0, 0, 0, 0, 1, byte(i)})
			}
			if err != nil {
				done <- err
				return
			}
			for n := range pings {
				if err := fr.WritePing(false, [8]byte{byte(i), byte(n >> 8), byte(n)}); err != nil {
					done <- err
					return
				}
			}
			if _, err := r.nc.Write(buf.Bytes()); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	acks, answers := 0, 0
	for acks < rounds*pings || answers < rounds {
		switch f := r.next(func(http2.Frame) bool { return true }).(type) {
		case *http2.PingFrame:
			if want := [8]byte{byte(acks / pings), byte(acks % pings >> 8), byte(acks % pings)}; !f.IsAck() || f.Data != want {
				t.Fatalf("PING answer %d: %v, want an acknowledgement of %v", acks, f, want)
			}
			acks++
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				answers++
			}
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestPingAckAfterResetCall: a PING read with a call is acknowledged even
// when that call is reset, so its answer, which would have carried the
// acknowledgement, is never written.
func TestPingAckAfterResetCall(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	_, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Echo": func(_ context.Context, req, out []byte) ([]byte, error) {
		close(started)
		<-release
		return append(out, req...), nil
	}}})
	r := dialSettled(t, addr)
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	saved := r.fr
	r.fr = fr
	r.headers(1, "/t.S/Echo", false)
	r.message(1, []byte("x"))
	r.fr = saved
	ping := [8]byte{7, 7, 7}
	if err := fr.WritePing(false, ping); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	if _, err := r.nc.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	<-started
	close(release)
	r.nc.SetDeadline(time.Now().Add(testenv.EventuallyBound))
	if f := r.next(func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() }).(*http2.PingFrame); f.Data != ping {
		t.Fatalf("acknowledged %v, want %v", f.Data, ping)
	}
}
