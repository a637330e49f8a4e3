package h2grpc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rawCodec lets a grpc-go client send and receive plain bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string                                 { return "raw" }
func init()                                                   { encoding.RegisterCodec(rawCodec{}) }
func callOpt() grpc.CallOption                                { return grpc.ForceCodec(rawCodec{}) }
func echo(_ context.Context, req, out []byte) ([]byte, error) { return append(out, req...), nil }

// serve starts a server on a loopback port; it stops with the test.
func serve(t *testing.T, o Options) (*Server, string) { return serveOn(t, o, nil) }

// serveOn is serve on the listener wrap makes of the loopback one.
func serveOn(t *testing.T, o Options, wrap func(net.Listener) net.Listener) (*Server, string) {
	t.Helper()
	s, err := NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := ln
	if wrap != nil {
		served = wrap(ln)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(served) }()
	t.Cleanup(func() {
		s.Stop()
		if err := <-done; !errors.Is(err, ErrServerStopped) {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, ln.Addr().String()
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestGRPCGoClient: grpc-go's client against the server, from empty to
// messages larger than both sides' initial windows (the answer must wait
// for the client's WINDOW_UPDATEs), statuses and deadlines.
func TestGRPCGoClient(t *testing.T) {
	var sawDeadline atomic.Bool
	_, addr := serve(t, Options{Methods: map[string]Method{
		"/t.S/Echo": echo,
		"/t.S/Fail": func(context.Context, []byte, []byte) ([]byte, error) {
			return nil, status.Error(codes.FailedPrecondition, "not now: 100% sure\n")
		},
		"/t.S/Plain": func(context.Context, []byte, []byte) ([]byte, error) { return nil, errors.New("plain") },
		"/t.S/Deadline": func(ctx context.Context, req, out []byte) ([]byte, error) {
			_, ok := ctx.Deadline()
			sawDeadline.Store(ok)
			return out, nil
		},
	}})
	cc := dial(t, addr)
	ctx := context.Background()
	for _, n := range []int{0, 1, 100, 16384, 70000, 1 << 20, 3 << 20} {
		req := bytes.Repeat([]byte{byte(n)}, n)
		for i := range req {
			req[i] = byte(i * 7)
		}
		var resp []byte
		if err := cc.Invoke(ctx, "/t.S/Echo", &req, &resp, callOpt()); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if !bytes.Equal(resp, req) {
			t.Fatalf("%d bytes: echo differs (%d bytes back)", n, len(resp))
		}
	}
	for _, tc := range []struct {
		method string
		code   codes.Code
		msg    string
	}{
		{"/t.S/Fail", codes.FailedPrecondition, "not now: 100% sure\n"},
		{"/t.S/Plain", codes.Unknown, "plain"},
		{"/t.S/Nope", codes.Unimplemented, "unknown method Nope for service t.S"},
	} {
		var req, resp []byte
		err := cc.Invoke(ctx, tc.method, &req, &resp, callOpt())
		if s, _ := status.FromError(err); s.Code() != tc.code || s.Message() != tc.msg {
			t.Errorf("%s: %v, want %v %q", tc.method, err, tc.code, tc.msg)
		}
	}
	big := make([]byte, 4<<20+1)
	var resp []byte
	err := cc.Invoke(ctx, "/t.S/Echo", &big, &resp, callOpt())
	if s, _ := status.FromError(err); s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), "larger than max") {
		t.Errorf("too large: %v", err)
	}
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var empty []byte
	if err := cc.Invoke(dctx, "/t.S/Deadline", &empty, &resp, callOpt()); err != nil || !sawDeadline.Load() {
		t.Errorf("deadline: %v, seen %v", err, sawDeadline.Load())
	}
	// The connection still serves after all of that.
	req := []byte("again")
	if err := cc.Invoke(ctx, "/t.S/Echo", &req, &resp, callOpt()); err != nil || string(resp) != "again" {
		t.Fatalf("after errors: %q %v", resp, err)
	}
}

// TestConcurrentCalls: many callers on few connections, each answer to its
// own caller.
func TestConcurrentCalls(t *testing.T) {
	_, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Echo": echo}, Workers: 4})
	conns := []*grpc.ClientConn{dial(t, addr), dial(t, addr)}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cc := conns[g%2]
			for i := 0; i < 200; i++ {
				req := []byte(fmt.Sprint(g, "/", i))
				var resp []byte
				if err := cc.Invoke(context.Background(), "/t.S/Echo", &req, &resp, callOpt()); err != nil || !bytes.Equal(req, resp) {
					errs <- fmt.Errorf("%s: %q %v", req, resp, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// raw is a hand-driven HTTP/2 client for what grpc-go's client never does.
type raw struct {
	t   *testing.T
	nc  net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	hb  bytes.Buffer
}

func dialRaw(t *testing.T, addr string, settings ...http2.Setting) *raw {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(testenv.EventuallyBound))
	r := &raw{t: t, nc: nc}
	r.fr = http2.NewFramer(nc, bufio.NewReader(nc))
	r.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	r.enc = hpack.NewEncoder(&r.hb)
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := r.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return r
}

// headers sends a request's HEADERS; fields override the defaults.
func (r *raw) headers(id uint32, path string, end bool, fields ...string) {
	r.t.Helper()
	if err := r.tryHeaders(id, path, end, fields...); err != nil {
		r.t.Fatal(err)
	}
}

func (r *raw) tryHeaders(id uint32, path string, end bool, fields ...string) error {
	r.hb.Reset()
	f := map[string]string{":method": "POST", ":scheme": "http", ":path": path, ":authority": "x", "content-type": "application/grpc", "te": "trailers"}
	for i := 0; i+1 < len(fields); i += 2 {
		f[fields[i]] = fields[i+1]
	}
	for _, k := range []string{":method", ":scheme", ":path", ":authority"} {
		r.enc.WriteField(hpack.HeaderField{Name: k, Value: f[k]})
		delete(f, k)
	}
	for k, v := range f {
		r.enc.WriteField(hpack.HeaderField{Name: k, Value: v})
	}
	return r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: r.hb.Bytes(), EndHeaders: true, EndStream: end})
}

func (r *raw) message(id uint32, msg []byte) {
	r.t.Helper()
	b := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	if err := r.fr.WriteData(id, true, append(b, msg...)); err != nil {
		r.t.Fatal(err)
	}
}

// next reads frames until one that want accepts, answering nothing.
func (r *raw) next(want func(http2.Frame) bool) http2.Frame {
	r.t.Helper()
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			r.t.Fatalf("reading: %v", err)
		}
		if want(f) {
			return f
		}
	}
}

func isStream(id uint32) func(http2.Frame) bool {
	return func(f http2.Frame) bool { return f.Header().StreamID == id }
}

func field(f http2.Frame, name string) string {
	if mh, ok := f.(*http2.MetaHeadersFrame); ok {
		for _, hf := range mh.Fields {
			if hf.Name == name {
				return hf.Value
			}
		}
	}
	return ""
}

// TestFlowControlOfAnswers: a peer with a 10-byte stream window gets the
// answer 10 bytes at a time, each piece only after its WINDOW_UPDATE.
func TestFlowControlOfAnswers(t *testing.T) {
	_, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Echo": echo}})
	r := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
	msg := []byte("twenty-five bytes of text")
	r.headers(1, "/t.S/Echo", false)
	r.message(1, msg)
	var got []byte
	r.next(isStream(1)) // the response headers
	for len(got) < len(msg)+5 {
		d, ok := r.next(isStream(1)).(*http2.DataFrame)
		if !ok {
			t.Fatalf("not DATA after %d bytes", len(got))
		}
		if len(d.Data()) > 10 {
			t.Fatalf("DATA of %d bytes past a 10-byte window", len(d.Data()))
		}
		got = append(got, d.Data()...)
		if len(got) < len(msg)+5 {
			// The window is spent: nothing may come before we grant more.
			r.nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			if f, err := r.fr.ReadFrame(); err == nil && f.Header().StreamID == 1 {
				t.Fatalf("frame %v on a spent window", f)
			}
			r.nc.SetReadDeadline(time.Now().Add(testenv.EventuallyBound))
		}
		if err := r.fr.WriteWindowUpdate(1, uint32(len(d.Data()))); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got[5:], msg) {
		t.Fatalf("answer %q", got)
	}
	tr := r.next(isStream(1))
	if !tr.Header().Flags.Has(http2.FlagHeadersEndStream) || field(tr, "grpc-status") != "0" {
		t.Fatalf("trailers %v", tr)
	}
}

// TestBadRequests: what is not a gRPC call gets the answer grpc-go gives.
func TestBadRequests(t *testing.T) {
	_, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Echo": echo}})
	r := dialRaw(t, addr)
	r.headers(1, "/t.S/Echo", true, "content-type", "text/plain")
	if f := r.next(isStream(1)); field(f, ":status") != "415" {
		t.Errorf("text/plain: %v", f)
	}
	r.headers(3, "/t.S/Echo", true, ":method", "GET")
	if f := r.next(isStream(3)); field(f, ":status") != "405" {
		t.Errorf("GET: %v", f)
	}
	r.headers(5, "/t.S/Echo", true)
	if f := r.next(isStream(5)); field(f, "grpc-status") != fmt.Sprint(int(codes.Internal)) {
		t.Errorf("no message: %v", f)
	}
	r.headers(7, "/t.S/Echo", false, "grpc-encoding", "br")
	if f := r.next(isStream(7)); field(f, "grpc-status") != fmt.Sprint(int(codes.Unimplemented)) || field(f, "grpc-accept-encoding") != "identity,gzip" {
		t.Errorf("br: %v", f)
	}
	r.headers(9, "/t.S/Echo", false, "grpc-timeout", "soon")
	if f := r.next(isStream(9)); field(f, "grpc-status") != fmt.Sprint(int(codes.Internal)) {
		t.Errorf("bad timeout: %v", f)
	}
	// A message cut short of its length prefix.
	r.headers(11, "/t.S/Echo", false)
	if err := r.fr.WriteData(11, true, []byte{0, 0, 0, 0, 9, 'x'}); err != nil {
		t.Fatal(err)
	}
	if f := r.next(func(f http2.Frame) bool { return f.Header().StreamID == 11 && f.Header().Type == http2.FrameHeaders }); field(f, "grpc-status") != fmt.Sprint(int(codes.Internal)) {
		t.Errorf("short message: %v", f)
	}
	// The connection is still good.
	r.headers(13, "/t.S/Echo", false)
	r.message(13, []byte("ok"))
	if f := r.next(func(f http2.Frame) bool { return f.Header().StreamID == 13 && f.Header().Type == http2.FrameData }); string(f.(*http2.DataFrame).Data()[5:]) != "ok" {
		t.Errorf("after bad requests: %v", f)
	}
	// PING is answered with its payload.
	if err := r.fr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8}); err != nil {
		t.Fatal(err)
	}
	p := r.next(func(f http2.Frame) bool { _, ok := f.(*http2.PingFrame); return ok }).(*http2.PingFrame)
	if !p.IsAck() || p.Data != [8]byte{1, 2, 3, 4, 5, 6, 7, 8} {
		t.Errorf("ping answer %v", p)
	}
}

// TestConnectionErrors: a peer that breaks the protocol gets GOAWAY and is
// closed.
func TestConnectionErrors(t *testing.T) {
	_, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Echo": echo}, MaxHeaderListSize: 1024})
	for name, send := range map[string]func(r *raw){
		"even stream": func(r *raw) { r.headers(2, "/t.S/Echo", true) },
		"huge headers": func(r *raw) {
			r.headers(1, "/t.S/Echo", true, "x-big", strings.Repeat("a", 4000))
		},
		"stream id going back": func(r *raw) { r.headers(5, "/t.S/Echo", true); r.headers(3, "/t.S/Echo", true) },
		"DATA on idle stream":  func(r *raw) { r.fr.WriteData(9, true, []byte{0, 0, 0, 0, 0}) },
		"frame over 16 KiB":    func(r *raw) { r.fr.WriteRawFrame(0xf0, 0, 0, make([]byte, 20000)) },
		"bad max frame size":   func(r *raw) { r.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1}) },
	} {
		t.Run(name, func(t *testing.T) {
			r := dialRaw(t, addr)
			send(r)
			g := r.next(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
			if g.ErrCode == http2.ErrCodeNo {
				t.Errorf("GOAWAY %v", g)
			}
			for {
				if _, err := r.fr.ReadFrame(); err != nil {
					break // closed
				}
			}
		})
	}
	t.Run("not HTTP/2", func(t *testing.T) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(testenv.EventuallyBound))
		io.WriteString(nc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, err := io.ReadAll(nc); err != nil {
			t.Fatalf("not closed: %v", err)
		}
	})
}

// TestStreamLimit: streams beyond MaxConcurrentStreams are refused, and a
// reset stream holds its place until its method returns, so resetting
// cannot run more methods at once than the limit (the HTTP/2 rapid reset
// attack).
func TestStreamLimit(t *testing.T) {
	release := make(chan struct{})
	var running, most atomic.Int64
	block := func(_ context.Context, _, out []byte) ([]byte, error) {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		running.Add(-1)
		return out, nil
	}
	_, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Block": block}, MaxConcurrentStreams: 4})
	r := dialRaw(t, addr)
	refused := 0
	for i := uint32(0); i < 40; i++ {
		id := 2*i + 1
		r.headers(id, "/t.S/Block", false)
		r.message(id, nil)
		r.fr.WriteRSTStream(id, http2.ErrCodeCancel)
	}
	// The last stream: refused or not, it tells us the reader got there.
	r.headers(81, "/t.S/Block", false)
	r.message(81, nil)
	for {
		f := r.next(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame)
		if f.ErrCode == http2.ErrCodeRefusedStream {
			refused++
		}
		if f.StreamID == 81 {
			break
		}
	}
	if most.Load() > 4 {
		t.Errorf("%d methods ran at once with a limit of 4", most.Load())
	}
	if refused < 36 {
		t.Errorf("%d streams refused, want at least 36 of 41", refused)
	}
	close(release)
}

// TestGracefulStop: a call in flight is answered, the client is told to go
// away, and the server then closes the connection.
func TestGracefulStop(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	s, addr := serve(t, Options{Methods: map[string]Method{
		"/t.S/Slow": func(_ context.Context, req, out []byte) ([]byte, error) {
			close(entered)
			<-release
			return append(out, "done"...), nil
		},
	}})
	cc := dial(t, addr)
	got := make(chan error, 1)
	go func() {
		var req, resp []byte
		err := cc.Invoke(context.Background(), "/t.S/Slow", &req, &resp, callOpt())
		if err == nil && string(resp) != "done" {
			err = fmt.Errorf("answer %q", resp)
		}
		got <- err
	}()
	<-entered
	stopped := make(chan struct{})
	go func() { s.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned with a call in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-got; err != nil {
		t.Fatalf("call in flight: %v", err)
	}
	<-stopped
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(ln); !errors.Is(err, ErrServerStopped) {
		t.Fatalf("Serve after stop: %v", err)
	}
}

func TestParseTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1S", time.Second, true},
		{"20m", 20 * time.Millisecond, true},
		{"99999999H", 1<<63 - 1, true},
		{"5u", 5 * time.Microsecond, true},
		{"7n", 7, true},
		{"3M", 3 * time.Minute, true},
		{"", 0, false},
		{"S", 0, false},
		{"123456789S", 0, false},
		{"+1S", 0, false},
		{"1s", 0, false},
		{"-1S", 0, false},
	} {
		got, err := parseTimeout(tc.in)
		if (err == nil) != tc.ok || tc.ok && got != tc.want {
			t.Errorf("parseTimeout(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func FuzzParseTimeout(f *testing.F) {
	for _, s := range []string{"1S", "20m", "99999999H", "", "x", "+1n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseTimeout(s)
		if err == nil && d < 0 {
			t.Fatalf("%q: negative %v", s, d)
		}
	})
}

// bidiSeed is a bidirectional stream for FuzzConnection: gzip-coded, its
// messages cut inside their prefixes and bodies and two in one frame, a
// padded frame, a message too large if tooLarge, and its end.
func bidiSeed(t testing.TB, tooLarge bool) []byte {
	var seed bytes.Buffer
	fr := http2.NewFramer(&seed, nil)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/t.S/Bidi"}, {":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"}, {"grpc-encoding", "gzip"}} {
		enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	stream := append(grpcMessage(0, []byte("hi")), grpcMessage(1, gzipped(t, []byte("coded")))...)
	stream = append(stream, grpcMessage(0, make([]byte, 300))...)
	for _, cut := range []int{3, 4, 30, 1} {
		fr.WriteData(1, false, stream[:cut])
		stream = stream[cut:]
	}
	fr.WriteDataPadded(1, false, stream, make([]byte, 7))
	if tooLarge {
		fr.WriteData(1, false, []byte{0, 0, 0, 8, 0})
	}
	fr.WriteData(1, true, nil)
	return seed.Bytes()
}

// FuzzConnection feeds arbitrary frames after a valid preface: the server
// must answer or close, never panic or hang.
func FuzzConnection(f *testing.F) {
	var seed bytes.Buffer
	fr := http2.NewFramer(&seed, nil)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/t.S/Echo"}, {":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	fr.WriteData(1, true, []byte{0, 0, 0, 0, 2, 'h', 'i'})
	fr.WritePing(false, [8]byte{})
	fr.WriteWindowUpdate(0, 100)
	f.Add(seed.Bytes())
	f.Add([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0})
	f.Add(append(append([]byte(nil), seed.Bytes()[:9]...), 0, 0, 8, 7, 0, 0, 0, 0, 0))
	f.Add(bidiSeed(f, false))
	f.Add(bidiSeed(f, true))
	s, err := NewServer(Options{
		Methods:              map[string]Method{"/t.S/Echo": echo},
		BidiMethods:          map[string]BidiMethod{"/t.S/Bidi": bidiEcho},
		MaxConcurrentStreams: 8,
		MaxRecvMsgSize:       1 << 10,
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		client, server := net.Pipe()
		c := newConn(s, server)
		done := make(chan struct{})
		go func() { c.serve(); close(done) }()
		go io.Copy(io.Discard, client)
		// Zeros after the input complete a frame it left open (none is
		// over 16 KiB), and are then DATA on stream 0, a connection error:
		// the server handles every frame of the input and ends by itself.
		// A client that closed right after its write would have the
		// server's first write fail, and the server stop before it handled
		// a frame.
		end := make([]byte, defaultFrameSize+2*9)
		client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		client.Write(append(append([]byte(http2.ClientPreface), in...), end...))
		defer client.Close()
		select {
		case <-done:
		case <-time.After(testenv.EventuallyBound):
			t.Fatal("connection did not end after a connection error")
		}
	})
}

// TestConnectionAge: connections are drained and replaced as they age, and
// no call fails for it.
func TestConnectionAge(t *testing.T) {
	var accepted atomic.Int64
	_, addr := serveOn(t, Options{Methods: map[string]Method{"/t.S/Echo": echo}, MaxConnectionAge: 30 * time.Millisecond, MaxConnectionAgeGrace: time.Second},
		func(ln net.Listener) net.Listener { return countingListener{ln, &accepted} })
	cc := dial(t, addr)
	deadline := time.Now().Add(testenv.EventuallyBound)
	for calls := 0; accepted.Load() < 3; calls++ {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections after %d calls", accepted.Load(), calls)
		}
		req := []byte("x")
		var resp []byte
		if err := cc.Invoke(context.Background(), "/t.S/Echo", &req, &resp, callOpt(), grpc.WaitForReady(true)); err != nil {
			t.Fatalf("call %d: %v", calls, err)
		}
	}
}

// TestHandshakeTimeout: a connection that never sends its preface is
// closed.
func TestHandshakeTimeout(t *testing.T) {
	_, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Echo": echo}, HandshakeTimeout: 50 * time.Millisecond})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(testenv.EventuallyBound))
	if _, err := io.ReadAll(nc); err != nil {
		t.Fatalf("not closed: %v", err)
	}
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// TestTLS: grpc-go's TLS client, which insists on "h2" by ALPN, against a
// server whose per-client config (as a certificate reloader returns it)
// offers no protocol of its own.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca, certFile, keyFile := testenv.GenerateTLS(t, dir, "127.0.0.1", "localhost")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	base := &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return &tls.Config{Certificates: []tls.Certificate{cert}}, nil
	}}
	_, addr := serveOn(t, Options{Methods: map[string]Method{"/t.S/Echo": echo}},
		func(ln net.Listener) net.Listener { return tls.NewListener(ln, TLSConfig(base)) })
	ccfg, err := testenv.ClientTLSConfig(ca, "", "")
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(ccfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	req := []byte("over TLS")
	var resp []byte
	if err := cc.Invoke(context.Background(), "/t.S/Echo", &req, &resp, callOpt()); err != nil || string(resp) != "over TLS" {
		t.Fatalf("%q %v", resp, err)
	}
}

// TestLargeRequestsTogether: large requests arriving interleaved on one
// connection all complete (the connection window does not wait for them to
// be served), and a small call beside them is not held up.
func TestLargeRequestsTogether(t *testing.T) {
	_, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Echo": echo}})
	cc := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 7)
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := bytes.Repeat([]byte{byte(i)}, 4<<20-100)
			var resp []byte
			if err := cc.Invoke(ctx, "/t.S/Echo", &req, &resp, callOpt()); err != nil || !bytes.Equal(req, resp) {
				errs <- fmt.Errorf("large request %d: %d bytes back, %v", i, len(resp), err)
			}
		}()
	}
	small := []byte("small")
	var resp []byte
	if err := cc.Invoke(ctx, "/t.S/Echo", &small, &resp, callOpt()); err != nil {
		errs <- fmt.Errorf("small request beside them: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestMaxRequestBytes: requests in progress past the connection's bound are
// answered ResourceExhausted and dropped; the connection goes on serving.
func TestMaxRequestBytes(t *testing.T) {
	_, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Echo": echo}, MaxRecvMsgSize: 40000, MaxRequestBytes: 50000})
	r := dialRaw(t, addr)
	chunk := make([]byte, 16000)
	chunk[3] = 0x90 // a message of 36,864 bytes, never finished
	for _, id := range []uint32{1, 3, 5, 7} {
		r.headers(id, "/t.S/Echo", false)
		if err := r.fr.WriteData(id, false, chunk); err != nil {
			t.Fatal(err)
		}
	}
	// 4 × 16,000 bytes: the fourth passes 50,000.
	f := r.next(func(f http2.Frame) bool { return f.Header().Type == http2.FrameHeaders })
	if f.Header().StreamID != 7 || field(f, "grpc-status") != fmt.Sprint(int(codes.ResourceExhausted)) {
		t.Fatalf("first answer: stream %d, %v", f.Header().StreamID, f)
	}
	r.fr.WriteRSTStream(1, http2.ErrCodeCancel) // frees its 16,000 bytes
	r.headers(9, "/t.S/Echo", false)
	r.message(9, []byte("still serving"))
	d := r.next(func(f http2.Frame) bool { return f.Header().StreamID == 9 && f.Header().Type == http2.FrameData })
	if string(d.(*http2.DataFrame).Data()[5:]) != "still serving" {
		t.Fatalf("after the bound: %v", d)
	}
}

func TestLongStatusMessage(t *testing.T) {
	long := "x" + strings.Repeat("é", 20000)
	_, addr := serve(t, Options{Methods: map[string]Method{
		"/t.S/Fail": func(context.Context, []byte, []byte) ([]byte, error) { return nil, status.Error(codes.Aborted, long) },
	}})
	cc := dial(t, addr)
	var req, resp []byte
	err := cc.Invoke(context.Background(), "/t.S/Fail", &req, &resp, callOpt())
	if s, _ := status.FromError(err); s.Code() != codes.Aborted || !strings.HasPrefix(long, strings.TrimSuffix(s.Message(), "...")) {
		t.Fatalf("%v", err)
	}
}

// TestPeerThatDoesNotRead: answers to a client that never reads fill the
// socket; the write times out and the connection, with every call waiting
// to write to it, is let go.
func TestPeerThatDoesNotRead(t *testing.T) {
	s, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Echo": echo}, WriteTimeout: 100 * time.Millisecond, MaxOutput: 64 << 10})
	r := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: maxWindow})
	if err := r.fr.WriteWindowUpdate(0, maxWindow-defaultWindow); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 1<<20)
	for id := uint32(1); id < 40; id += 2 {
		if err := r.tryHeaders(id, "/t.S/Echo", false); err != nil {
			break // closed already
		}
		if err := r.fr.WriteData(id, false, append([]byte{0, 0, 0x10, 0, 0}, big[:16000]...)); err != nil {
			break // closed already
		}
		for off := 16000; off < len(big); off += 16000 {
			end := min(off+16000, len(big))
			if err := r.fr.WriteData(id, end == len(big), big[off:end]); err != nil {
				break
			}
		}
	}
	testenv.Eventually(t, "the connection of a peer that does not read to close", func() bool { return len(s.connList()) == 0 })
}

// TestWindowChangesWhileWaiting: an answer waiting for window goes on when
// the peer raises its initial window by SETTINGS, and one whose stream the
// peer resets is dropped, so that a graceful stop does not wait for it.
func TestWindowChangesWhileWaiting(t *testing.T) {
	s, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Echo": echo}})
	r := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
	msg := []byte("twenty-five bytes of text")
	firstData := func(id uint32) {
		t.Helper()
		r.headers(id, "/t.S/Echo", false)
		r.message(id, msg)
		d, ok := r.next(func(f http2.Frame) bool { return f.Header().StreamID == id && f.Header().Type == http2.FrameData }).(*http2.DataFrame)
		if !ok || len(d.Data()) != 10 {
			t.Fatalf("stream %d: first DATA %v", id, d)
		}
	}
	firstData(1)
	if err := r.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100}); err != nil {
		t.Fatal(err)
	}
	rest := r.next(func(f http2.Frame) bool { return f.Header().StreamID == 1 && f.Header().Type == http2.FrameData }).(*http2.DataFrame)
	if len(rest.Data()) != len(msg)+5-10 {
		t.Fatalf("after SETTINGS: %d bytes", len(rest.Data()))
	}
	if tr := r.next(isStream(1)); field(tr, "grpc-status") != "0" {
		t.Fatalf("trailers %v", tr)
	}
	// Back to 10 bytes; the next answer waits, and is then reset.
	if err := r.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10}); err != nil {
		t.Fatal(err)
	}
	firstData(3)
	if err := r.fr.WriteRSTStream(3, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { s.GracefulStop(); close(stopped) }()
	// The client answers the drain's PING, as clients do.
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			break // closed: the waiting answer did not hold the drain
		}
		if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
			r.fr.WritePing(true, p.Data)
		}
	}
	select {
	case <-stopped:
	case <-time.After(testenv.EventuallyBound):
		t.Fatal("GracefulStop waits for an answer whose stream was reset")
	}
}

// TestStreamMethod: a server-streaming call sends its messages in order,
// large ones waiting for window, ends with its status, and sees its
// context end when the client cancels.
func TestStreamMethod(t *testing.T) {
	ended := make(chan error, 1)
	_, addr := serve(t, Options{StreamMethods: map[string]StreamMethod{
		"/t.S/Count": func(ctx context.Context, req []byte, send func([]byte) error) error {
			n := int(req[0])
			for i := 0; i < n; i++ {
				msg := bytes.Repeat([]byte{byte(i)}, 1+i*50000)
				if err := send(msg); err != nil {
					return err
				}
			}
			return status.Error(codes.OutOfRange, "counted")
		},
		"/t.S/Forever": func(ctx context.Context, _ []byte, send func([]byte) error) error {
			if err := send([]byte("first")); err != nil {
				return err
			}
			<-ctx.Done()
			ended <- ctx.Err()
			return ctx.Err()
		},
	}})
	cc := dial(t, addr)
	desc := &grpc.StreamDesc{ServerStreams: true}
	ctx := context.Background()
	cs, err := cc.NewStream(ctx, desc, "/t.S/Count", callOpt())
	if err != nil {
		t.Fatal(err)
	}
	req := []byte{6}
	if err := cs.SendMsg(&req); err != nil {
		t.Fatal(err)
	}
	cs.CloseSend()
	for i := 0; ; i++ {
		var msg []byte
		err := cs.RecvMsg(&msg)
		if err != nil {
			if s, _ := status.FromError(err); i != 6 || s.Code() != codes.OutOfRange || s.Message() != "counted" {
				t.Fatalf("after %d messages: %v", i, err)
			}
			break
		}
		if len(msg) != 1+i*50000 || msg[0] != byte(i) {
			t.Fatalf("message %d: %d bytes of %d", i, len(msg), msg[0])
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cs, err = cc.NewStream(cctx, desc, "/t.S/Forever", callOpt())
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(&req); err != nil {
		t.Fatal(err)
	}
	cs.CloseSend()
	var msg []byte
	if err := cs.RecvMsg(&msg); err != nil || string(msg) != "first" {
		t.Fatalf("first message %q %v", msg, err)
	}
	cancel()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("method's context ended with %v", err)
		}
	case <-time.After(testenv.EventuallyBound):
		t.Fatal("cancelling the call did not end the method's context")
	}
}

// TestStopBeforePreface: a graceful stop closes a connection that has not
// sent its preface without writing anything to it (our SETTINGS must come
// first, and there is no call to wait for).
func TestStopBeforePreface(t *testing.T) {
	s, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Echo": echo}})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(testenv.EventuallyBound))
	testenv.Eventually(t, "the server to hold the connection", func() bool { return len(s.connList()) > 0 })
	s.GracefulStop()
	b, err := io.ReadAll(nc)
	if err != nil || len(b) != 0 {
		t.Fatalf("read %q, %v; want nothing and a close", b, err)
	}
}

func TestOptionsValidate(t *testing.T) {
	for name, o := range map[string]Options{
		"both kinds":                    {Methods: map[string]Method{"/a/B": echo}, StreamMethods: map[string]StreamMethod{"/a/B": nil}},
		"bidi and unary":                {Methods: map[string]Method{"/a/B": echo}, BidiMethods: map[string]BidiMethod{"/a/B": bidiEcho}},
		"bidi and server-streaming":     {StreamMethods: map[string]StreamMethod{"/a/B": nil}, BidiMethods: map[string]BidiMethod{"/a/B": bidiEcho}},
		"negative workers":              {Workers: -1},
		"small window":                  {ConnWindow: 100},
		"message over window":           {MaxRecvMsgSize: maxWindow},
		"request bound below a message": {MaxRecvMsgSize: 1000, MaxRequestBytes: 10},
		"negative write timeout":        {WriteTimeout: -time.Second},
	} {
		if _, err := NewServer(o); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
