package h2grpc

import (
	"context"
	"testing"

	"golang.org/x/net/http2"
)

// goAwayCode reads until GOAWAY and returns its code.
func (r *raw) goAwayCode() http2.ErrCode {
	r.t.Helper()
	return r.next(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame).ErrCode
}

// pingRoundTrip sends a PING and returns the frames read before its
// acknowledgement: all the server wrote before it read the PING.
func (r *raw) pingRoundTrip(data [8]byte) []http2.Frame {
	r.t.Helper()
	if err := r.fr.WritePing(false, data); err != nil {
		r.t.Fatal(err)
	}
	var before []http2.Frame
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			r.t.Fatalf("reading: %v", err)
		}
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() && p.Data == data {
			return before
		}
		before = append(before, f)
	}
}

// TestStreamStates: frames on streams in the states RFC 9113 section 5.1
// forbids them are errors, and nothing is written on a closed stream.
func TestStreamStates(t *testing.T) {
	started, release := make(chan struct{}, 1), make(chan struct{})
	block := func(_ context.Context, _, out []byte) ([]byte, error) {
		started <- struct{}{}
		<-release
		return out, nil
	}
	_, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Echo": echo, "/t.S/Block": block}})
	defer close(release)

	connErrors := []struct {
		name string
		code http2.ErrCode
		send func(r *raw)
	}{
		{"RST_STREAM on an idle stream", http2.ErrCodeProtocol, func(r *raw) { r.fr.WriteRSTStream(1, http2.ErrCodeCancel) }},
		{"WINDOW_UPDATE on an idle stream", http2.ErrCodeProtocol, func(r *raw) { r.fr.WriteWindowUpdate(3, 1) }},
		{"RST_STREAM on an even stream", http2.ErrCodeProtocol, func(r *raw) {
			r.headers(3, "/t.S/Echo", true)
			r.fr.WriteRSTStream(2, http2.ErrCodeCancel)
		}},
		{"PRIORITY depending on itself", http2.ErrCodeProtocol, func(r *raw) {
			r.fr.WritePriority(5, http2.PriorityParam{StreamDep: 5, Weight: 1})
		}},
		{"DATA after the answer to an ended call", http2.ErrCodeStreamClosed, func(r *raw) {
			r.headers(1, "/t.S/Echo", false)
			r.message(1, []byte("x"))
			answers(r.t, r, 1)
			r.fr.WriteData(1, true, msg0())
		}},
		{"DATA while an ended call runs", http2.ErrCodeStreamClosed, func(r *raw) {
			r.headers(1, "/t.S/Block", false)
			r.message(1, nil)
			<-started
			r.fr.WriteData(1, true, msg0())
		}},
		{"DATA after the client reset the stream", http2.ErrCodeStreamClosed, func(r *raw) {
			r.headers(1, "/t.S/Echo", false)
			r.fr.WriteRSTStream(1, http2.ErrCodeCancel)
			r.fr.WriteData(1, true, msg0())
		}},
		{"DATA after HEADERS that ended the stream", http2.ErrCodeStreamClosed, func(r *raw) {
			r.headers(1, "/t.S/Echo", true, ":method", "GET")
			r.fr.WriteData(1, true, msg0())
		}},
	}
	for _, c := range connErrors {
		t.Run(c.name, func(t *testing.T) {
			r := dialRaw(t, addr)
			c.send(r)
			if got := r.goAwayCode(); got != c.code {
				t.Fatalf("GOAWAY %v, want %v", got, c.code)
			}
		})
	}

	t.Run("DATA in flight on a stream we reset is dropped", func(t *testing.T) {
		r := dialRaw(t, addr)
		r.headers(1, "/t.S/Nobody", false)
		if f := r.next(isStream(1)); field(f, "grpc-status") != "12" {
			t.Fatalf("unknown method: %v", f)
		}
		if f, ok := r.next(isStream(1)).(*http2.RSTStreamFrame); !ok || f.ErrCode != http2.ErrCodeNo {
			t.Fatalf("want RST_STREAM(NO_ERROR), got %v", f)
		}
		r.fr.WriteData(1, false, []byte{0, 0, 0})
		r.fr.WriteData(1, true, []byte{0, 0})
		for _, f := range r.pingRoundTrip([8]byte{1}) {
			t.Errorf("after DATA on a stream we reset: %v", f)
		}
	})

	t.Run("an answer to an ended request is not followed by RST_STREAM", func(t *testing.T) {
		r := dialRaw(t, addr)
		r.pingRoundTrip([8]byte{1}) // past the handshake's frames
		r.headers(1, "/t.S/Echo", true, ":method", "GET")
		r.headers(3, "/t.S/Echo", true, "content-type", "text/html")
		r.headers(5, "/t.S/Echo", true, "grpc-encoding", "br")
		r.headers(7, "/t.S/Echo", false)
		r.message(7, nil)
		ended := map[uint32]bool{}
		check := func(f http2.Frame) {
			switch {
			case f.Header().StreamID == 0:
			case ended[f.Header().StreamID]:
				t.Errorf("frame on closed stream: %v", f)
			case f.Header().Flags.Has(http2.FlagDataEndStream) && f.Header().Type != http2.FrameRSTStream:
				ended[f.Header().StreamID] = true
			}
		}
		for len(ended) < 4 {
			check(r.next(func(http2.Frame) bool { return true }))
		}
		for _, f := range r.pingRoundTrip([8]byte{2}) {
			check(f)
		}
	})

	t.Run("an HTTP error is a complete HTTP answer within flow control", func(t *testing.T) {
		r := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		r.headers(1, "/t.S/Echo", false, ":method", "GET")
		if f := r.next(isStream(1)); field(f, ":status") != "405" || field(f, "content-type") != "text/plain; charset=utf-8" {
			t.Fatalf("headers %v", f)
		}
		for _, f := range r.pingRoundTrip([8]byte{3}) {
			if f.Header().StreamID == 1 {
				t.Fatalf("frame past a zero window: %v", f)
			}
		}
		r.fr.WriteWindowUpdate(1, 1<<20)
		var body []byte
		for {
			f := r.next(isStream(1))
			if d, ok := f.(*http2.DataFrame); ok {
				body = append(body, d.Data()...)
				continue
			}
			if field(f, "grpc-status") != "13" || !f.Header().Flags.Has(http2.FlagHeadersEndStream) {
				t.Fatalf("trailers %v", f)
			}
			break
		}
		if string(body) != "grpc: the request's :method is \"GET\", not POST\n" {
			t.Errorf("body %q", body)
		}
		// The request had not ended: it is reset once the answer is all out.
		if f, ok := r.next(isStream(1)).(*http2.RSTStreamFrame); !ok || f.ErrCode != http2.ErrCodeNo {
			t.Fatalf("want RST_STREAM(NO_ERROR), got %v", f)
		}
	})
}

func TestOurResets(t *testing.T) {
	t.Parallel()
	var r ourResets
	if r.has(1) {
		t.Fatal("empty set has 1")
	}
	for id := uint32(1); id <= 9; id += 2 {
		r.add(id, 3)
	}
	for id, want := range map[uint32]bool{1: false, 3: false, 5: true, 7: true, 9: true, 11: false} {
		if r.has(id) != want {
			t.Errorf("has(%d) = %v, want %v", id, !want, want)
		}
	}
	r.forget(7)
	r.add(11, 3) // takes 5's slot
	for id, want := range map[uint32]bool{5: false, 7: false, 9: true, 11: true} {
		if r.has(id) != want {
			t.Errorf("after forget: has(%d) = %v, want %v", id, !want, want)
		}
	}
}
