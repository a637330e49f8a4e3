package h2grpc

import (
	"bytes"
	"context"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestFloodBudget: the budget's arithmetic, on a clock of its own.
func TestFloodBudget(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	t.Run("keepalive every 10 s for a day", func(t *testing.T) {
		var b budget
		for i := range 24 * 360 {
			if !b.take(t0.Add(time.Duration(i)*10*time.Second), time.Second, 10) {
				t.Fatalf("ping %d refused", i)
			}
		}
	})
	t.Run("one a second for a day, after a burst", func(t *testing.T) {
		var b budget
		for i := range 10 {
			if !b.take(t0, time.Second, 10) {
				t.Fatalf("burst frame %d refused", i)
			}
		}
		for i := range 24 * 3600 {
			if !b.take(t0.Add(time.Duration(i+1)*time.Second), time.Second, 10) {
				t.Fatalf("frame %d after the burst refused", i)
			}
		}
	})
	t.Run("a flood", func(t *testing.T) {
		var b budget
		n := 0
		for b.take(t0.Add(time.Duration(n)*time.Millisecond), time.Second, 10) {
			n++
		}
		if n < 10 || n > 11 {
			t.Errorf("%d frames 1 ms apart passed, want the burst of 10", n)
		}
	})
}

// floodWrite sends n frames that frame makes, in one write, from a
// framer of its own (the test reads r.fr meanwhile).
func floodWrite(t *testing.T, r *raw, n int, frame func(fr *http2.Framer, i int) error) chan error {
	done := make(chan error, 1)
	go func() {
		var buf bytes.Buffer
		fr := http2.NewFramer(&buf, nil)
		for i := range n {
			if err := frame(fr, i); err != nil {
				done <- err
				return
			}
		}
		_, err := r.nc.Write(buf.Bytes())
		done <- err
	}()
	return done
}

// TestFloods: a peer that floods PING or SETTINGS gets GOAWAY
// ENHANCE_YOUR_CALM after about its burst; PINGs among answers never
// count, however many.
func TestFloods(t *testing.T) {
	_, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Echo": echo}})
	for _, c := range []struct {
		name  string
		frame func(fr *http2.Framer, i int) error
		acks  func(f http2.Frame) bool
		burst int
	}{
		{"PING", func(fr *http2.Framer, i int) error { return fr.WritePing(false, [8]byte{byte(i)}) },
			func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() }, 10},
		{"SETTINGS", func(fr *http2.Framer, i int) error { return fr.WriteSettings() },
			func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && s.IsAck() }, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := dialSettled(t, addr)
			done := floodWrite(t, r, 100_000, c.frame)
			acks := 0
			for {
				f := r.next(func(http2.Frame) bool { return true })
				if c.acks(f) {
					acks++
				}
				if g, ok := f.(*http2.GoAwayFrame); ok {
					if g.ErrCode != http2.ErrCodeEnhanceYourCalm {
						t.Fatalf("GOAWAY %v", g.ErrCode)
					}
					break
				}
			}
			// The handshake's SETTINGS took one share of that budget;
			// the clock may give back one more.
			if acks > c.burst+1 {
				t.Errorf("%d acknowledgements before GOAWAY, want at most the burst of %d", acks, c.burst)
			}
			<-done // a write cut off by the close is fine
		})
	}
	t.Run("PINGs among answers", func(t *testing.T) {
		r := dialSettled(t, addr)
		for i := range 50 {
			id := uint32(2*i + 1)
			r.headers(id, "/t.S/Echo", false)
			r.message(id, []byte{byte(i)})
			answers(t, r, id)
			for _, f := range r.pingRoundTrip([8]byte{byte(i)}) {
				if g, ok := f.(*http2.GoAwayFrame); ok {
					t.Fatalf("GOAWAY %v after %d calls, each followed by a PING", g.ErrCode, i)
				}
			}
		}
	})
}

// grpc-go's client sends a PING (its bandwidth-delay estimate) for every
// window of a long answer it receives: those PINGs follow data and never
// spend the flood budget.
func TestLongAnswersWithEstimatePings(t *testing.T) {
	long := bytes.Repeat([]byte("sluice "), (4<<20)/7)
	big := func(_ context.Context, _, out []byte) ([]byte, error) { return append(out, long...), nil }
	_, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Big": big}})
	cc := dial(t, addr)
	for i := range 8 {
		req, resp := []byte("x"), []byte(nil)
		if err := cc.Invoke(context.Background(), "/t.S/Big", &req, &resp, callOpt()); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if len(resp) != len(long) {
			t.Fatalf("call %d: %d bytes back", i+1, len(resp))
		}
	}
}
