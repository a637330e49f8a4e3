package h2grpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcgzip "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testenv"
)

var bidiDesc = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

// bidiEcho sends back every message, and three "bye" after the client's
// half-close.
func bidiEcho(_ context.Context, recv func() ([]byte, error), send func([]byte) error) error {
	for {
		msg, err := recv()
		if err == io.EOF {
			for range 3 {
				if err := send([]byte("bye")); err != nil {
					return err
				}
			}
			return nil
		}
		if err != nil {
			return err
		}
		if err := send(msg); err != nil {
			return err
		}
	}
}

// patterned is n bytes that differ with seed and position.
func patterned(seed, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(seed*31 + i*7)
	}
	return b
}

// TestBidiGRPCGo: grpc-go's client streams both ways, message by message
// and with the client sending ahead, plain and gzip-coded, from empty
// messages to ones larger than a frame; after its half-close the method
// still sends, then ends OK.
func TestBidiGRPCGo(t *testing.T) {
	_, addr := serve(t, Options{BidiMethods: map[string]BidiMethod{"/t.S/Echo": bidiEcho}})
	cc := dial(t, addr)
	size := func(i int) int { return []int{0, 1, 100, 16384, 16390, 70000, 300 << 10}[i%7] }
	for _, opts := range [][]grpc.CallOption{{callOpt()}, {callOpt(), grpc.UseCompressor(grpcgzip.Name)}} {
		cs, err := cc.NewStream(context.Background(), bidiDesc, "/t.S/Echo", opts...)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 30 { // in turn
			msg := patterned(i, size(i))
			if err := cs.SendMsg(&msg); err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
			var got []byte
			if err := cs.RecvMsg(&got); err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("echo %d: %d bytes, %v", i, len(got), err)
			}
		}
		sent := make(chan error, 1)
		go func() { // ahead
			for i := range 60 {
				msg := patterned(i, size(i))
				if err := cs.SendMsg(&msg); err != nil {
					sent <- err
					return
				}
			}
			sent <- cs.CloseSend()
		}()
		for i := range 60 {
			var got []byte
			if err := cs.RecvMsg(&got); err != nil || !bytes.Equal(got, patterned(i, size(i))) {
				t.Fatalf("echo %d ahead: %d bytes, %v", i, len(got), err)
			}
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			var got []byte
			if err := cs.RecvMsg(&got); err != nil || string(got) != "bye" {
				t.Fatalf("after the half-close, message %d: %q %v", i, got, err)
			}
		}
		var got []byte
		if err := cs.RecvMsg(&got); err != io.EOF {
			t.Fatalf("end: %v, want io.EOF (status OK)", err)
		}
	}
}

// readMessages reads stream id's DATA until its trailers and splits it
// into messages.
func readMessages(t *testing.T, r *raw, id uint32) ([][]byte, string) {
	t.Helper()
	var data []byte
	for {
		switch f := r.next(isStream(id)).(type) {
		case *http2.DataFrame:
			data = append(data, f.Data()...)
		case *http2.MetaHeadersFrame:
			if !f.StreamEnded() {
				continue
			}
			var msgs [][]byte
			for len(data) >= 5 {
				n := 5 + int(binary.BigEndian.Uint32(data[1:5]))
				msgs = append(msgs, data[5:n])
				data = data[n:]
			}
			return msgs, field(f, "grpc-status")
		}
	}
}

// TestBidiFraming: messages cut across DATA frames anywhere (inside the
// prefix too) and several in one frame, gzip-coded ones among them, and a
// stream with no message at all.
func TestBidiFraming(t *testing.T) {
	_, addr := serve(t, Options{BidiMethods: map[string]BidiMethod{"/t.S/Echo": bidiEcho}})
	r := dialRaw(t, addr)
	var want [][]byte
	var stream []byte
	for i, n := range []int{0, 1, 7, 20000, 3, 0, 12000, 5} {
		msg := patterned(i, n)
		want = append(want, msg)
		if i%3 == 2 {
			stream = append(stream, grpcMessage(1, gzipped(t, msg))...)
		} else {
			stream = append(stream, grpcMessage(0, msg)...)
		}
	}
	r.headers(1, "/t.S/Echo", false, "grpc-encoding", "gzip")
	cuts := []int{1, 2, 4, 3, 16384, 5, 100, 9, 7000, 6}
	for i := 0; len(stream) > 0; i++ {
		n := min(cuts[i%len(cuts)], len(stream))
		if err := r.fr.WriteData(1, n == len(stream), stream[:n]); err != nil {
			t.Fatal(err)
		}
		stream = stream[n:]
	}
	msgs, code := readMessages(t, r, 1)
	if code != "0" || len(msgs) != len(want)+3 {
		t.Fatalf("%d messages, status %q", len(msgs), code)
	}
	for i, m := range want {
		if !bytes.Equal(msgs[i], m) {
			t.Fatalf("message %d: %d bytes back of %d", i, len(msgs[i]), len(m))
		}
	}
	// No message: the half-close comes with the headers.
	r.headers(3, "/t.S/Echo", true)
	if msgs, code := readMessages(t, r, 3); code != "0" || len(msgs) != 3 {
		t.Fatalf("no message: %d back, status %q", len(msgs), code)
	}
}

// TestBidiStreamWindow: the stream's window goes back only as the method
// takes messages, and a client sending past it is a FLOW_CONTROL_ERROR;
// the method ends when the connection does.
func TestBidiStreamWindow(t *testing.T) {
	allow := make(chan struct{}, 16)
	ended := make(chan error, 1)
	_, addr := serve(t, Options{MaxRecvMsgSize: 1000, BidiMethods: map[string]BidiMethod{
		"/t.S/Gated": func(ctx context.Context, recv func() ([]byte, error), _ func([]byte) error) error {
			for {
				select {
				case <-allow:
				case <-ctx.Done():
					ended <- ctx.Err()
					return ctx.Err()
				}
				if _, err := recv(); err != nil {
					ended <- err
					return err
				}
			}
		},
	}})
	r := dialRaw(t, addr)
	r.headers(1, "/t.S/Gated", false)
	five := func() { // 5 × 201 bytes: the whole window of 1005
		for i := range 5 {
			if err := r.fr.WriteData(1, false, grpcMessage(0, patterned(i, 196))); err != nil {
				t.Fatal(err)
			}
		}
	}
	five()
	// The reader has handled the DATA before it acknowledges the PING: a
	// WINDOW_UPDATE it gave would come first.
	if err := r.fr.WritePing(false, [8]byte{7}); err != nil {
		t.Fatal(err)
	}
	for {
		f := r.next(func(http2.Frame) bool { return true })
		if w, ok := f.(*http2.WindowUpdateFrame); ok && w.StreamID == 1 {
			t.Fatalf("stream window given back (%d) before the method read", w.Increment)
		}
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
			break
		}
	}
	// Five reads take the five messages; the sixth writes the window
	// they give back before it waits (a send would have carried it).
	for range 6 {
		allow <- struct{}{}
	}
	for back := uint32(0); back < 1005; {
		w, ok := r.next(isStream(1)).(*http2.WindowUpdateFrame)
		if !ok {
			t.Fatal("not a WINDOW_UPDATE")
		}
		back += w.Increment
		if back > 1005 {
			t.Fatalf("%d bytes of window given back for 1005 read", back)
		}
	}
	five() // the sixth read takes one, too little to give back: the window is spent

	if err := r.fr.WriteData(1, false, []byte{0}); err != nil {
		t.Fatal(err)
	}
	g := r.next(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
	if g.ErrCode != http2.ErrCodeFlowControl {
		t.Fatalf("GOAWAY %v, want FLOW_CONTROL_ERROR", g.ErrCode)
	}
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("method ended without an error")
		}
	case <-time.After(testenv.EventuallyBound):
		t.Fatal("the method did not end with its connection")
	}
}

// TestBidiBackPressure: a method that does not read holds its client to
// one stream window, while another call on the same connection is
// answered; once it reads, everything arrives in order.
func TestBidiBackPressure(t *testing.T) {
	release := make(chan struct{})
	s, addr := serve(t, Options{
		MaxRecvMsgSize: 64 << 10,
		Methods:        map[string]Method{"/t.S/Unary": echo},
		BidiMethods: map[string]BidiMethod{"/t.S/Slow": func(ctx context.Context, recv func() ([]byte, error), send func([]byte) error) error {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			for i := 0; ; i++ {
				msg, err := recv()
				if err == io.EOF {
					return send([]byte(strconv.Itoa(i)))
				}
				if err != nil {
					return err
				}
				if !bytes.Equal(msg, patterned(i, 10<<10)) {
					return status.Errorf(codes.DataLoss, "message %d differs", i)
				}
			}
		}},
	})
	cc := dial(t, addr)
	cs, err := cc.NewStream(context.Background(), bidiDesc, "/t.S/Slow", callOpt())
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	var sent atomic.Int64
	done := make(chan error, 1)
	go func() {
		for i := range n {
			msg := patterned(i, 10<<10)
			if err := cs.SendMsg(&msg); err != nil {
				done <- err
				return
			}
			sent.Add(1)
		}
		done <- cs.CloseSend()
	}()
	const window = 64<<10 + 5
	testenv.Eventually(t, "the stream's window to be spent", func() bool {
		for _, c := range s.connList() {
			c.mu.Lock()
			full := c.buffered == window
			c.mu.Unlock()
			if full {
				return true
			}
		}
		return false
	})
	req := []byte("meanwhile")
	var resp []byte
	if err := cc.Invoke(context.Background(), "/t.S/Unary", &req, &resp, callOpt()); err != nil || string(resp) != "meanwhile" {
		t.Fatalf("unary call beside the held stream: %q %v", resp, err)
	}
	// grpc-go buffers at most its write quota (64 KiB) beyond the window.
	if got := sent.Load(); got >= n {
		t.Fatalf("all %d messages sent to a method that reads none", got)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var got []byte
	if err := cs.RecvMsg(&got); err != nil || string(got) != strconv.Itoa(n) {
		t.Fatalf("count %q %v", got, err)
	}
	if err := cs.RecvMsg(&got); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

// TestBidiEnds: how a call ends other than OK: the method's status while
// the client still sends, a message too large, an unknown method, the
// client cancelling.
func TestBidiEnds(t *testing.T) {
	cancelled := make(chan [2]error, 1)
	_, addr := serve(t, Options{MaxRecvMsgSize: 1000, BidiMethods: map[string]BidiMethod{
		"/t.S/Echo": bidiEcho,
		"/t.S/Once": func(_ context.Context, recv func() ([]byte, error), send func([]byte) error) error {
			msg, err := recv()
			if err != nil {
				return err
			}
			if err := send(msg); err != nil {
				return err
			}
			return status.Error(codes.Aborted, "enough")
		},
		"/t.S/Ignore": func(_ context.Context, recv func() ([]byte, error), _ func([]byte) error) error {
			for {
				if _, err := recv(); err != nil {
					return nil // the request's failure is the status all the same
				}
			}
		},
		"/t.S/Watch": func(ctx context.Context, recv func() ([]byte, error), send func([]byte) error) error {
			for {
				msg, err := recv()
				if err != nil {
					cancelled <- [2]error{err, context.Cause(ctx)}
					return err
				}
				if err := send(msg); err != nil {
					return err
				}
			}
		},
	}})
	cc := dial(t, addr)
	open := func(ctx context.Context, method string) grpc.ClientStream {
		t.Helper()
		cs, err := cc.NewStream(ctx, bidiDesc, method, callOpt())
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	wantStatus := func(cs grpc.ClientStream, code codes.Code, text string) {
		t.Helper()
		var got []byte
		err := cs.RecvMsg(&got)
		if s, _ := status.FromError(err); s.Code() != code || !bytes.Contains([]byte(s.Message()), []byte(text)) {
			t.Fatalf("%v, want %v %q", err, code, text)
		}
	}
	msg := []byte("one")
	cs := open(context.Background(), "/t.S/Once")
	cs.SendMsg(&msg)
	var got []byte
	if err := cs.RecvMsg(&got); err != nil || string(got) != "one" {
		t.Fatalf("first answer %q %v", got, err)
	}
	cs.SendMsg(&msg) // still sending: discarded
	wantStatus(cs, codes.Aborted, "enough")

	big := make([]byte, 2000)
	for _, m := range []string{"/t.S/Echo", "/t.S/Ignore"} {
		cs = open(context.Background(), m)
		cs.SendMsg(&big)
		wantStatus(cs, codes.ResourceExhausted, "larger than max")
	}

	cs = open(context.Background(), "/t.S/Nope")
	cs.SendMsg(&msg)
	wantStatus(cs, codes.Unimplemented, "unknown method Nope")

	ctx, cancel := context.WithCancel(context.Background())
	cs = open(ctx, "/t.S/Watch")
	cs.SendMsg(&msg)
	if err := cs.RecvMsg(&got); err != nil {
		t.Fatal(err)
	}
	cancel() // RST_STREAM
	select {
	case errs := <-cancelled:
		if s, _ := status.FromError(errs[0]); s.Code() != codes.Canceled || !errors.Is(errs[1], errStreamReset) {
			t.Fatalf("recv after the client's cancel: %v, cause %v", errs[0], errs[1])
		}
	case <-time.After(testenv.EventuallyBound):
		t.Fatal("the method's recv did not end with the client's cancel")
	}
	// The connection still serves.
	cs = open(context.Background(), "/t.S/Once")
	cs.SendMsg(&msg)
	if err := cs.RecvMsg(&got); err != nil || string(got) != "one" {
		t.Fatalf("after the ends: %q %v", got, err)
	}
}

// TestBidiEndsBeforeClient: a method that returns while its client sends
// ends the stream with trailers and RST_STREAM(NO_ERROR); what the client
// sends afterwards is dropped, its connection window given back, and the
// connection serves on.
func TestBidiEndsBeforeClient(t *testing.T) {
	_, addr := serve(t, Options{ConnWindow: 1 << 16, Methods: map[string]Method{"/t.S/Unary": echo}, BidiMethods: map[string]BidiMethod{
		"/t.S/First": func(_ context.Context, recv func() ([]byte, error), _ func([]byte) error) error {
			_, err := recv()
			return err
		},
	}})
	r := dialRaw(t, addr)
	r.headers(1, "/t.S/First", false)
	if err := r.fr.WriteData(1, false, grpcMessage(0, []byte("hi"))); err != nil {
		t.Fatal(err)
	}
	notWindow := func(f http2.Frame) bool {
		_, ok := f.(*http2.WindowUpdateFrame)
		return !ok && f.Header().StreamID == 1
	}
	if tr := r.next(notWindow); field(tr, "grpc-status") != "0" || !tr.Header().Flags.Has(http2.FlagHeadersEndStream) {
		t.Fatalf("trailers %v", tr)
	}
	if rst, ok := r.next(notWindow).(*http2.RSTStreamFrame); !ok || rst.ErrCode != http2.ErrCodeNo {
		t.Fatalf("after the trailers: %v, want RST_STREAM(NO_ERROR)", rst)
	}
	chunk := make([]byte, 16000)
	for range 3 {
		if err := r.fr.WriteData(1, false, chunk); err != nil {
			t.Fatal(err)
		}
	}
	var back uint32
	for back < 32000 { // given back a quarter window (16 KiB) at a time
		if w, ok := r.next(isStream(0)).(*http2.WindowUpdateFrame); ok {
			back += w.Increment
		}
	}
	r.headers(3, "/t.S/Unary", false)
	r.message(3, []byte("still serving"))
	d := r.next(func(f http2.Frame) bool { return f.Header().StreamID == 3 && f.Header().Type == http2.FrameData })
	if string(d.(*http2.DataFrame).Data()[5:]) != "still serving" {
		t.Fatalf("after the dropped DATA: %v", d)
	}
}

// TestBidiConnectionClose: a method waiting in recv gets an error when its
// client goes away.
func TestBidiConnectionClose(t *testing.T) {
	waiting, ended := make(chan struct{}), make(chan error, 1)
	_, addr := serve(t, Options{BidiMethods: map[string]BidiMethod{
		"/t.S/Wait": func(_ context.Context, recv func() ([]byte, error), _ func([]byte) error) error {
			close(waiting)
			_, err := recv()
			ended <- err
			return err
		},
	}})
	r := dialRaw(t, addr)
	r.headers(1, "/t.S/Wait", false)
	<-waiting
	r.nc.Close()
	select {
	case err := <-ended:
		if err == nil || err == io.EOF {
			t.Fatalf("recv after the connection closed: %v", err)
		}
	case <-time.After(testenv.EventuallyBound):
		t.Fatal("recv did not end with the connection")
	}
}

// TestBidiMaxRequestBytes: what bidirectional calls hold counts in the
// connection's bound like any request.
func TestBidiMaxRequestBytes(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	_, addr := serve(t, Options{MaxRecvMsgSize: 40000, MaxRequestBytes: 50000, BidiMethods: map[string]BidiMethod{
		"/t.S/Hold": func(ctx context.Context, recv func() ([]byte, error), _ func([]byte) error) error {
			select {
			case <-hold:
			case <-ctx.Done():
			}
			_, err := recv()
			return err
		},
	}})
	r := dialRaw(t, addr)
	for _, id := range []uint32{1, 3} {
		r.headers(id, "/t.S/Hold", false)
		msg := grpcMessage(0, make([]byte, 30000))
		for _, part := range [][]byte{msg[:15000], msg[15000:]} {
			if err := r.fr.WriteData(id, false, part); err != nil {
				t.Fatal(err)
			}
		}
	}
	f := r.next(func(f http2.Frame) bool { return f.Header().Type == http2.FrameHeaders })
	if f.Header().StreamID != 3 || field(f, "grpc-status") != fmt.Sprint(int(codes.ResourceExhausted)) {
		t.Fatalf("first answer: stream %d, %v", f.Header().StreamID, f)
	}
}

// TestBidiDrain: a graceful stop and a connection's age end streaming
// calls (their contexts end with ErrDraining, which is UNAVAILABLE) rather
// than wait for them, and Serve returns.
func TestBidiDrain(t *testing.T) {
	hold := func(ctx context.Context, recv func() ([]byte, error), send func([]byte) error) error {
		for {
			msg, err := recv()
			if err != nil {
				return err
			}
			if err := send(msg); err != nil {
				return err
			}
		}
	}
	watch := func(ctx context.Context, _ []byte, send func([]byte) error) error {
		if err := send([]byte("serving")); err != nil {
			return err
		}
		<-ctx.Done()
		return context.Cause(ctx)
	}
	o := Options{BidiMethods: map[string]BidiMethod{"/t.S/Hold": hold}, StreamMethods: map[string]StreamMethod{"/t.S/Watch": watch}}
	open := func(t *testing.T, cc *grpc.ClientConn) []grpc.ClientStream {
		// Bounded, so that a drain that waits for the streams fails the
		// test instead of hanging it.
		ctx, cancel := context.WithTimeout(context.Background(), testenv.EventuallyBound)
		t.Cleanup(cancel)
		msg := []byte("x")
		var got []byte
		bidi, err := cc.NewStream(ctx, bidiDesc, "/t.S/Hold", callOpt())
		if err == nil {
			err = bidi.SendMsg(&msg)
		}
		if err == nil {
			err = bidi.RecvMsg(&got)
		}
		if err != nil {
			t.Fatal(err)
		}
		watch, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/t.S/Watch", callOpt())
		if err == nil {
			err = watch.SendMsg(&msg)
		}
		if err == nil {
			err = watch.CloseSend()
		}
		if err == nil {
			err = watch.RecvMsg(&got)
		}
		if err != nil {
			t.Fatal(err)
		}
		return []grpc.ClientStream{bidi, watch}
	}
	unavailable := func(t *testing.T, streams []grpc.ClientStream) {
		for i, cs := range streams {
			var got []byte
			if err := cs.RecvMsg(&got); status.Code(err) != codes.Unavailable {
				t.Errorf("stream %d: %v, want UNAVAILABLE", i, err)
			}
		}
	}
	t.Run("GracefulStop", func(t *testing.T) {
		s, err := NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- s.Serve(ln) }()
		t.Cleanup(s.Stop) // if the test fails before the stop ends
		streams := open(t, dial(t, ln.Addr().String()))
		stopped := make(chan struct{})
		go func() { s.GracefulStop(); close(stopped) }()
		unavailable(t, streams)
		select {
		case <-stopped:
		case <-time.After(testenv.EventuallyBound):
			t.Fatal("GracefulStop waits for the streams")
		}
		if err := <-served; !errors.Is(err, ErrServerStopped) {
			t.Fatalf("Serve: %v", err)
		}
	})
	t.Run("MaxConnectionAge", func(t *testing.T) {
		o := o
		o.MaxConnectionAge = 50 * time.Millisecond
		_, addr := serve(t, o)
		unavailable(t, open(t, dial(t, addr)))
	})
}

// TestBidiDeadline: the call's deadline ends the method's context, and a
// recv and a send waiting for it (the client reads nothing) return.
func TestBidiDeadline(t *testing.T) {
	ended := make(chan [2]error, 1)
	_, addr := serve(t, Options{MaxOutput: 1 << 10, BidiMethods: map[string]BidiMethod{
		"/t.S/Flood": func(ctx context.Context, recv func() ([]byte, error), send func([]byte) error) error {
			if _, ok := ctx.Deadline(); !ok {
				return status.Error(codes.FailedPrecondition, "no deadline")
			}
			recvd := make(chan error, 1)
			go func() {
				for {
					if _, err := recv(); err != nil {
						recvd <- err
						return
					}
				}
			}()
			var err error
			for err == nil {
				err = send(make([]byte, 4<<10))
			}
			ended <- [2]error{err, <-recvd}
			return err
		},
	}})
	// A client with a small window that never reads its answers: send
	// waits for window, with output over MaxOutput.
	r := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100})
	r.headers(1, "/t.S/Flood", false, "grpc-timeout", "200m")
	select {
	case errs := <-ended:
		for i, err := range errs {
			if status.Code(err) != codes.DeadlineExceeded {
				t.Errorf("%s: %v, want DEADLINE_EXCEEDED", []string{"send", "recv"}[i], err)
			}
		}
	case <-time.After(testenv.EventuallyBound):
		t.Fatal("the deadline did not end send and recv")
	}
}

// TestBidiRecvAfterReturn: a method that receives on a goroutine of its
// own and returns while that recv waits has the recv answered (an error),
// so the goroutine ends with the call.
func TestBidiRecvAfterReturn(t *testing.T) {
	ended := make(chan error, 1)
	method := func(ctx context.Context, recv func() ([]byte, error), send func([]byte) error) error {
		if _, err := recv(); err != nil {
			return err
		}
		waiting := make(chan struct{})
		go func() {
			close(waiting)
			_, err := recv() // nothing more comes: it waits until the call ends
			ended <- err
		}()
		<-waiting
		return status.Error(codes.Aborted, "done")
	}
	_, addr := serve(t, Options{BidiMethods: map[string]BidiMethod{"/t.S/Go": method}})
	cc := dial(t, addr)
	cs, err := cc.NewStream(context.Background(), bidiDesc, "/t.S/Go", callOpt())
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("hi")
	if err := cs.SendMsg(&msg); err != nil {
		t.Fatal(err)
	}
	var got []byte
	if err := cs.RecvMsg(&got); status.Code(err) != codes.Aborted {
		t.Fatalf("call ended with %v, want the method's ABORTED", err)
	}
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("recv after the method returned gave a message")
		}
	case <-time.After(testenv.EventuallyBound):
		t.Fatal("a recv waiting when the method returned was never answered")
	}
}
