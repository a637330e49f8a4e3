package transport_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/settings"
)

const (
	rlsMethod  = rlsv3.RateLimitService_ShouldRateLimit_FullMethodName
	rlqsMethod = rlqsv3.RateLimitQuotaService_StreamRateLimitQuotas_FullMethodName
)

// rssMB is this process's resident size (the server runs in it), after a
// collection that returns free memory to the system, so that garbage (of
// the tests before, too) does not count.
func rssMB(t *testing.T) float64 {
	t.Helper()
	debug.FreeOSMemory()
	n, err := testenv.RSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return float64(n) / (1 << 20)
}

// The RSS bounds: what the attacks below may add to the process, server
// and client together. Before the limits, grpc-go held 100,000 streams on
// one connection (459 MB) and queued unread answers without end (346 MB
// in 3 s).
const (
	streamsRSSBoundMB = 64
	unreadRSSBoundMB  = 64
)

// One connection opening 100,000 streams that each wait for a message
// holds SLUICE_GRPC_MAX_CONCURRENT_STREAMS of them; the rest are refused,
// and memory stays bounded.
func TestGRPCStreamsPerConnectionBounded(t *testing.T) {
	forEachGRPCServer(t, func(t *testing.T, env map[string]string) {
		h := start(t, with(env, "SLUICE_GRPC_STALL_TIMEOUT", "1h"), map[string]string{"a.yaml": anyValueRule})
		c := dialH2(t, h.GRPC)
		c.settled()
		before := rssMB(t)
		const n, limit = 100_000, 1024
		type tally struct {
			refused, other int
			err            error
		}
		done := make(chan tally, 1)
		mark := [8]byte{'s', 't', 'r', 'e', 'a', 'm', 's'}
		go func() {
			var r tally
			c.nc.SetReadDeadline(time.Now().Add(2 * time.Minute))
			for {
				f, err := c.fr.ReadFrame()
				if err != nil {
					r.err = err
					done <- r
					return
				}
				switch f := f.(type) {
				case *http2.RSTStreamFrame:
					if f.ErrCode == http2.ErrCodeRefusedStream {
						r.refused++
					} else {
						r.other++
					}
				case *http2.PingFrame:
					if f.IsAck() && f.Data == mark {
						done <- r
						return
					}
				}
			}
		}()
		start := time.Now()
		for i := 0; i < n; i += 1000 {
			c.write(func() error {
				for j := i; j < i+1000; j++ {
					if err := c.headers(uint32(2*j+1), rlqsMethod, false); err != nil {
						return err
					}
				}
				return nil
			})
		}
		// Answered after every stream before it: the tally is complete.
		c.write(func() error { return c.fr.WritePing(false, mark) })
		r := <-done
		took := time.Since(start)
		grew := rssMB(t) - before
		t.Logf("%d streams opened in %v: %d refused, %d reset otherwise; RSS grew %.1f MB", n, took.Round(time.Millisecond), r.refused, r.other, grew)
		if r.err != nil {
			t.Fatalf("reading: %v", r.err)
		}
		if r.refused < n-limit {
			t.Errorf("%d of %d streams refused; at most %d may be open", r.refused, n, limit)
		}
		if grew > streamsRSSBoundMB && !raceEnabled { // the race detector multiplies memory
			t.Errorf("RSS grew %.1f MB, more than the bound of %d MB", grew, streamsRSSBoundMB)
		}
	})
}

// A client that sends calls and never reads their answers is not read
// either once what it has not read is bounded: its writes stop, and the
// server's memory stays bounded.
func TestGRPCUnreadAnswersBounded(t *testing.T) {
	forEachGRPCServer(t, func(t *testing.T, env map[string]string) {
		h := start(t, env, map[string]string{"a.yaml": anyValueRule})
		req, err := proto.Marshal(rlsReq("d", "k", "v"))
		if err != nil {
			t.Fatal(err)
		}
		c := dialH2(t, h.GRPC)
		c.settled()
		// All the window there is: nothing but the socket holds answers
		// back, as with a client that reads nothing.
		c.write(func() error {
			if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1}); err != nil {
				return err
			}
			return c.fr.WriteWindowUpdate(0, 1<<31-1-65535)
		})
		before := rssMB(t)
		const most, batch = 2_000_000, 500
		sent, blocked, start := 0, false, time.Now()
		for id := uint32(1); sent < most && time.Since(start) < 60*time.Second; {
			c.nc.SetWriteDeadline(time.Now().Add(2 * time.Second))
			err := c.tryWrite(func() error {
				for range batch {
					if err := c.headers(id, rlsMethod, false); err != nil {
						return err
					}
					if err := c.message(id, req); err != nil {
						return err
					}
					id += 2
				}
				return nil
			})
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				blocked = true
				break
			}
			if err != nil {
				break // cut off: as bounded as stopping to read
			}
			sent += batch
		}
		grew := rssMB(t) - before
		t.Logf("%d calls sent in %v before the server stopped reading (%v); RSS grew %.1f MB", sent, time.Since(start).Round(time.Millisecond), blocked, grew)
		if sent >= most {
			t.Errorf("the server read %d calls whose answers were not read", sent)
		}
		if grew > unreadRSSBoundMB && !raceEnabled { // the race detector multiplies memory
			t.Errorf("RSS grew %.1f MB, more than the bound of %d MB", grew, unreadRSSBoundMB)
		}
	})
}

// A peer that floods SETTINGS or PING frames is cut off after about the
// native server's burst, with either server.
func TestGRPCControlFloodsCutOff(t *testing.T) {
	forEachGRPCServer(t, func(t *testing.T, env map[string]string) {
		h := start(t, env, map[string]string{"a.yaml": anyValueRule})
		for _, kind := range []string{"SETTINGS", "PING"} {
			t.Run(kind, func(t *testing.T) {
				c := dialH2(t, h.GRPC)
				c.settled()
				const n = 100_000
				wrote := make(chan int, 1)
				go func() {
					i := 0
					defer func() { wrote <- i }()
					for ; i < n; i += 1000 {
						if c.tryWrite(func() error {
							for j := range 1000 {
								var err error
								if kind == "SETTINGS" {
									err = c.fr.WriteSettings()
								} else {
									err = c.fr.WritePing(false, [8]byte{byte(j)})
								}
								if err != nil {
									return err
								}
							}
							return nil
						}) != nil {
							return
						}
					}
				}()
				acks, code := 0, http2.ErrCode(1<<32-1)
				c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
				var err error
				for err == nil {
					var f http2.Frame
					f, err = c.fr.ReadFrame()
					switch f := f.(type) {
					case *http2.SettingsFrame:
						if f.IsAck() {
							acks++
						}
					case *http2.PingFrame:
						if f.IsAck() {
							acks++
						}
					case *http2.GoAwayFrame:
						code = f.ErrCode
					}
				}
				c.nc.Close() // the writer stops
				w := <-wrote
				t.Logf("%s flood: %d acknowledgements, GOAWAY %v, %d frames written, then %v", kind, acks, code, w, err)
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("not cut off after %d acknowledgements", acks)
				}
				if acks > 200 {
					t.Errorf("%d acknowledgements before the cut; the burst is 100 SETTINGS, 10 PINGs", acks)
				}
			})
		}
	})
}

// Over TLS, grpc-go's connections are guarded after the handshake: a
// SETTINGS flood is cut off there too.
func TestGRPCGoTLSGuarded(t *testing.T) {
	caFile, cert, key := testenv.GenerateTLS(t, t.TempDir())
	h := start(t, map[string]string{"SLUICE_GRPC_SERVER": "grpc-go", "GRPC_SERVER_USE_TLS": "true",
		"GRPC_SERVER_TLS_CERT": cert, "GRPC_SERVER_TLS_KEY": key}, map[string]string{"a.yaml": anyValueRule})
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	nc, err := tls.Dial("tcp", h.GRPC, &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	c := clientH2(t, nc)
	c.settled()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 100_000; i += 1000 {
			if c.tryWrite(func() error {
				for range 1000 {
					if err := c.fr.WriteSettings(); err != nil {
						return err
					}
				}
				return nil
			}) != nil {
				return
			}
		}
	}()
	code := c.untilClosed(20 * time.Second)
	nc.Close()
	<-done
	if code != http2.ErrCodeEnhanceYourCalm {
		t.Logf("closed with GOAWAY %v (a reset may beat it)", code)
	}
}

// A connection idle after its handshake is closed, GOAWAY first, after
// SLUICE_GRPC_IDLE_TIMEOUT.
func TestGRPCIdleConnectionClosed(t *testing.T) {
	forEachGRPCServer(t, func(t *testing.T, env map[string]string) {
		const idle = 300 * time.Millisecond
		h := start(t, with(env, "SLUICE_GRPC_IDLE_TIMEOUT", idle.String()), map[string]string{"a.yaml": anyValueRule})
		c := dialH2(t, h.GRPC)
		c.settled()
		start := time.Now()
		code := c.untilClosed(20 * time.Second)
		took := time.Since(start)
		t.Logf("closed after %v, GOAWAY %v", took.Round(time.Millisecond), code)
		if code != http2.ErrCodeNo {
			t.Errorf("GOAWAY %v, want NO_ERROR before the close", code)
		}
		if took < idle*9/10 {
			t.Errorf("closed after %v, before the idle timeout %v", took, idle)
		}
	})
}

// A stream that sent only its headers is answered DEADLINE_EXCEEDED after
// SLUICE_GRPC_STALL_TIMEOUT, a unary call and a quota stream alike; the
// connection serves on.
func TestGRPCStalledStreamsClosed(t *testing.T) {
	forEachGRPCServer(t, func(t *testing.T, env map[string]string) {
		const stall = 300 * time.Millisecond
		h := start(t, with(with(env, "SLUICE_GRPC_STALL_TIMEOUT", stall.String()), "SLUICE_GRPC_IDLE_TIMEOUT", "1h"), map[string]string{"a.yaml": anyValueRule})
		c := dialH2(t, h.GRPC)
		c.settled()
		start := time.Now()
		c.write(func() error {
			if err := c.headers(1, rlsMethod, false); err != nil {
				return err
			}
			return c.headers(3, rlqsMethod, false)
		})
		got := c.statuses(20*time.Second, 1, 3)
		took := time.Since(start)
		t.Logf("answered %v after %v", got, took.Round(time.Millisecond))
		for _, id := range []uint32{1, 3} {
			if got[id] != "200/4" {
				t.Errorf("stream %d: :status/grpc-status %q, want 200/4 (DEADLINE_EXCEEDED)", id, got[id])
			}
		}
		if took < stall*9/10 {
			t.Errorf("answered after %v, before the stall timeout %v", took, stall)
		}
		req, _ := proto.Marshal(rlsReq("d", "k", "v"))
		c.write(func() error {
			if err := c.headers(5, rlsMethod, false); err != nil {
				return err
			}
			return c.message(5, req)
		})
		if got := c.statuses(20*time.Second, 5); !strings.HasSuffix(got[5], "/0") {
			t.Errorf("a call after the stalled ones: %q", got[5])
		}
	})
}

// statuses reads until each of ids has ended and returns their
// :status/grpc-status.
func (c *h2) statuses(bound time.Duration, ids ...uint32) map[uint32]string {
	c.t.Helper()
	got := map[uint32]string{}
	c.nc.SetReadDeadline(time.Now().Add(bound))
	for len(got) < len(ids) {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("waiting for streams %v (have %v): %v", ids, got, err)
		}
		if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
			c.write(func() error { return c.fr.WritePing(true, p.Data) })
		}
		if mh, ok := f.(*http2.MetaHeadersFrame); ok && mh.StreamEnded() {
			got[mh.StreamID] = mh.PseudoValue("status") + "/" + fieldOf(mh, "grpc-status")
		}
	}
	return got
}

// rawBytes is a codec that sends bytes as they are: a malformed message.
type rawBytes struct{}

func (rawBytes) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawBytes) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawBytes) Name() string { return "proto" }
func rawCall(cc *grpc.ClientConn, method string, in []byte) error {
	var out []byte
	return cc.Invoke(context.Background(), method, &in, &out, grpc.ForceCodec(rawBytes{}))
}

// A request that is not a valid message is INVALID_ARGUMENT on both
// servers, for the rate limit call, the health check and the quota stream.
func TestMalformedRequestIsInvalidArgument(t *testing.T) {
	forEachGRPCServer(t, func(t *testing.T, env map[string]string) {
		h := start(t, env, map[string]string{"a.yaml": anyValueRule})
		cc := h.GRPCConn(t)
		bad := []byte{0x0a, 0x05, 'd'} // field 1, 5 bytes long, cut short
		for _, m := range []string{rlsMethod, "/grpc.health.v1.Health/Check"} {
			err := rawCall(cc, m, bad)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "unmarshal") {
				t.Errorf("%s: %v, want InvalidArgument saying it could not unmarshal", m, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, rlqsMethod, grpc.ForceCodec(rawBytes{}))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SendMsg(&bad); err != nil {
			t.Fatal(err)
		}
		var out []byte
		if err := s.RecvMsg(&out); status.Code(err) != codes.InvalidArgument {
			t.Errorf("quota stream: %v, want InvalidArgument", err)
		}
	})
}

// The limits are read from the environment and checked.
func TestGRPCLimitSettings(t *testing.T) {
	s, err := settingsFor(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Listen.GRPCLimits, settings.DefaultGRPCLimits(); got != want {
		t.Errorf("defaults %+v, want %+v", got, want)
	}
	s, err = settingsFor(map[string]string{"SLUICE_GRPC_MAX_CONCURRENT_STREAMS": "10", "SLUICE_GRPC_IDLE_TIMEOUT": "1m", "SLUICE_GRPC_STALL_TIMEOUT": "2s"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (settings.GRPCLimits{MaxConcurrentStreams: 10, IdleTimeout: time.Minute, StallTimeout: 2 * time.Second}); s.Listen.GRPCLimits != want {
		t.Errorf("read %+v, want %+v", s.Listen.GRPCLimits, want)
	}
	for env, want := range map[string]string{
		"SLUICE_GRPC_MAX_CONCURRENT_STREAMS": "SLUICE_GRPC_MAX_CONCURRENT_STREAMS (0)",
		"SLUICE_GRPC_IDLE_TIMEOUT":           "must be positive",
		"SLUICE_GRPC_STALL_TIMEOUT":          "must be positive",
	} {
		if _, err := settingsFor(map[string]string{env: "0"}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=0: %v, want an error with %q", env, err, want)
		}
	}
}

// outcomes reads until each of ids has ended and returns its first
// :status and its grpc-status, "415/3" say.
func (c *h2) outcomes(bound time.Duration, ids ...uint32) map[uint32]string {
	c.t.Helper()
	first, got := map[uint32]string{}, map[uint32]string{}
	c.nc.SetReadDeadline(time.Now().Add(bound))
	missing := func() bool {
		for _, id := range ids {
			if _, ok := got[id]; !ok {
				return true
			}
		}
		return false
	}
	for missing() {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("waiting for streams %v (have %v): %v", ids, got, err)
		}
		switch f := f.(type) {
		case *http2.PingFrame:
			if !f.IsAck() {
				c.write(func() error { return c.fr.WritePing(true, f.Data) })
			}
		case *http2.RSTStreamFrame:
			if _, ok := got[f.StreamID]; !ok {
				got[f.StreamID] = "RST_STREAM " + f.ErrCode.String()
			}
		case *http2.MetaHeadersFrame:
			if _, ok := first[f.StreamID]; !ok {
				first[f.StreamID] = f.PseudoValue("status")
			}
			if f.StreamEnded() {
				got[f.StreamID] = first[f.StreamID] + "/" + fieldOf(f, "grpc-status")
			}
		}
	}
	return got
}

// The same bad request gets the same HTTP and gRPC status from both
// servers.
func TestBadRequestsSameOnBothServers(t *testing.T) {
	req, _ := proto.Marshal(rlsReq("d", "k", "v"))
	frame := func(flag byte, size uint32, msg []byte) []byte {
		return append(binary.BigEndian.AppendUint32([]byte{flag}, size), msg...)
	}
	cases := []struct {
		name   string
		fields []string // over the defaults of a unary RLS call
		end    bool     // END_STREAM on the headers
		data   []byte   // the DATA, ending the stream
	}{
		{"unknown method", []string{":path", "/no.Such/Method"}, false, frame(0, uint32(len(req)), req)},
		{"not gRPC content-type", []string{"content-type", "text/plain"}, false, frame(0, uint32(len(req)), req)},
		{"message over 4 MiB", nil, false, frame(0, 5<<20, req)},
		{"compressed without encoding", nil, false, frame(1, uint32(len(req)), req)},
		{"unknown encoding", []string{"grpc-encoding", "snappy"}, false, frame(0, uint32(len(req)), req)},
		{"malformed message", nil, false, frame(0, 3, []byte{0x0a, 0x05, 'd'})},
		{"no message", nil, true, nil},
		{"message cut short", nil, false, frame(0, 100, req)},
		{"malformed grpc-timeout", []string{"grpc-timeout", "soon"}, false, frame(0, uint32(len(req)), req)},
	}
	got := map[string]map[string]string{}
	forEachGRPCServer(t, func(t *testing.T, env map[string]string) {
		h := start(t, env, map[string]string{"a.yaml": anyValueRule})
		c := dialH2(t, h.GRPC)
		c.settled()
		out := map[string]string{}
		for i, tc := range cases {
			id := uint32(2*i + 1)
			c.write(func() error {
				if err := c.headersWith(id, tc.end, tc.fields...); err != nil {
					return err
				}
				if tc.data != nil {
					return c.fr.WriteData(id, true, tc.data)
				}
				return nil
			})
			out[tc.name] = c.outcomes(20*time.Second, id)[id]
		}
		got[env["SLUICE_GRPC_SERVER"]] = out
	})
	for _, tc := range cases {
		n, g := got["native"][tc.name], got["grpc-go"][tc.name]
		t.Logf("%-28s native %-22s grpc-go %s", tc.name, n, g)
		if n != g {
			t.Errorf("%s: native answers %s, grpc-go %s", tc.name, n, g)
		}
	}
}
