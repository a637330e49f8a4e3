package main

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// countingServer answers like the no-op, or with err, and counts its calls and
// the requests' descriptors.
type countingServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
	calls, descs atomic.Int64
	err          error
}

func (s *countingServer) ShouldRateLimit(_ context.Context, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	s.calls.Add(1)
	s.descs.Add(int64(len(r.Descriptors)))
	if r.Domain != "bench" {
		return nil, status.Error(codes.InvalidArgument, "domain "+r.Domain)
	}
	return okResponse, s.err
}

func serveCounting(t *testing.T, s *countingServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(g, s)
	done := make(chan struct{})
	go func() { defer close(done); g.Serve(ln) }()
	t.Cleanup(func() { g.Stop(); <-done })
	return ln.Addr().String()
}

func TestDriveH2(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, tc := range []struct {
		name    string
		w       workload
		err     error
		wantErr string
	}{
		{name: "one caller", w: workload{Callers: 1, Conns: 1, Keys: 10, Descriptors: 1}},
		{name: "callers share connections", w: workload{Callers: 20, Conns: 3, Keys: 1000, Descriptors: 3}},
		{name: "errors are counted, not decisions", w: workload{Callers: 4, Conns: 2, Keys: 1, Descriptors: 1},
			err: status.Error(codes.Unavailable, "down"), wantErr: "grpc-status=14"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &countingServer{err: tc.err}
			addr := serveCounting(t, s)
			res, err := driveH2([]string{addr}, tc.w, 20*time.Millisecond, 200*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantErr != "" {
				if res.Decisions != 0 || res.Errors == 0 || !strings.Contains(res.FirstErr, tc.wantErr) {
					t.Fatalf("decisions %d, errors %d, first %q; want only errors with %q", res.Decisions, res.Errors, res.FirstErr, tc.wantErr)
				}
				return
			}
			if res.Errors != 0 || res.Decisions == 0 {
				t.Fatalf("decisions %d, errors %d (%s)", res.Decisions, res.Errors, res.FirstErr)
			}
			// Every counted decision reached the server, with its descriptors;
			// the server also saw the warmup's calls and those cut by the end.
			if calls := s.calls.Load(); calls < int64(res.Decisions) {
				t.Fatalf("server answered %d calls, the driver counted %d decisions", calls, res.Decisions)
			}
			if got, want := s.descs.Load(), s.calls.Load()*int64(tc.w.Descriptors); got != want {
				t.Fatalf("server saw %d descriptors in %d calls, want %d each", got, s.calls.Load(), tc.w.Descriptors)
			}
			if res.P50 <= 0 || res.P99 < res.P50 {
				t.Fatalf("p50 %v, p99 %v", res.P50, res.P99)
			}
		})
	}
}

// A server that stops answering ends the run through the connections'
// deadline instead of hanging the bench.
func TestDriveH2EndsWithoutAnswers(t *testing.T) {
	defer func(g time.Duration) { driveGrace = g }(driveGrace)
	driveGrace = 300 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Connections are held open, never read from nor answered.
	held := make(chan net.Conn, 1)
	go func() {
		defer close(held)
		for c, err := ln.Accept(); err == nil; c, err = ln.Accept() {
			held <- c
		}
	}()
	defer func() {
		ln.Close()
		for c := range held {
			c.Close()
		}
	}()
	start := time.Now()
	_, err = driveH2([]string{ln.Addr().String()}, workload{Callers: 2, Conns: 1, Keys: 1, Descriptors: 1}, 0, 50*time.Millisecond)
	if err == nil {
		t.Fatal("a run against a silent server succeeded")
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("took %v", el)
	}
}

func TestEveryDriverIsNamedAndExplained(t *testing.T) {
	for _, name := range []string{"h2", "grpc"} {
		if _, err := driverNamed(name); err != nil {
			t.Errorf("driver %q: %v", name, err)
		}
		if driverText[name] == "" {
			t.Errorf("driver %q has no text for the table", name)
		}
	}
	if _, err := driverNamed("h3"); err == nil || !strings.Contains(err.Error(), `"h3"`) {
		t.Errorf("an unknown driver gives %v, want an error naming it", err)
	}
}

// After a connection's first call, a call's header block is one index byte
// per field, as with a real client's HPACK encoder, so servers are not
// measured decoding literals that no client sends.
func TestH2HeaderBlocksIndexAfterTheFirst(t *testing.T) {
	var phase atomic.Int32
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	hc := newH2Conn(c1, "127.0.0.1:8081", &phase)
	if len(hc.header) != 6 {
		t.Fatalf("later header block is %d bytes (% x), want 6 indexes", len(hc.header), hc.header)
	}
	if len(hc.first) <= len(hc.header) {
		t.Fatalf("first header block (%d bytes) should carry the literals", len(hc.first))
	}
}
