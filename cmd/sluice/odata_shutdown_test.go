package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// SIGTERM (the context ending) while a page is still streaming: the OData
// service drains what it can within its deadline, cuts the rest, and run
// returns nil, so the process exits 0 (it used to exit 1).
func TestODataShutdownWhileStreaming(t *testing.T) {
	for _, tc := range []struct {
		name  string
		drain time.Duration
		read  bool // the client reads the page to its end
	}{
		// Drained: the deadline is far beyond what sending the page takes
		// even on a starved machine (the page, not the deadline, is tested).
		{"drained", 5 * time.Minute, true},
		{"cut at the deadline", 200 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			s, c, done := runODataForTest(ctx, t, "-demo-rows", "12000",
				"-odata-shutdown-timeout", tc.drain.String(), "-requests-per-second", "0")

			conn, err := net.Dial("tcp", s.ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.(*net.TCPConn).SetReadBuffer(256 << 10)
			req, _ := http.NewRequest("GET", "http://"+s.ln.Addr().String()+c.opts.Root+"/Records?$top=10000", nil)
			req.Header.Set("x-api-key", s.demoKey)
			if err := req.Write(conn); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), req)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("page: %v %v", resp, err)
			}
			stop() // SIGTERM
			var body strings.Builder
			var readErr error
			if tc.read {
				_, readErr = io.Copy(&body, resp.Body)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("run after SIGTERM: %v (the exit status would be 1)", err)
				}
			case <-time.After(2 * time.Minute):
				t.Fatal("run did not return")
			}
			if tc.read && (readErr != nil || !json.Valid([]byte(body.String()))) {
				t.Fatalf("the drained page did not arrive whole: %v, %d bytes", readErr, body.Len())
			}
		})
	}
}

// runODataForTest runs `sluice odata` in process on a fresh SQLite file
// with its demo data, on a free loopback port, with args after those, and
// returns once the data is generated: the service, its configuration, and
// the channel its run's error comes on after ctx ends.
func runODataForTest(ctx context.Context, t *testing.T, args ...string) (*odataService, *odataConfig, <-chan error) {
	t.Helper()
	fs := flag.NewFlagSet("odata", flag.ContinueOnError)
	c := odataFlags(fs)
	db := "sqlite:" + filepath.Join(t.TempDir(), "o.sqlite")
	if err := fs.Parse(append([]string{"-db", db, "-odata-addr", "127.0.0.1:0"}, args...)); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := startOData(ctx, c, log)
	if err != nil {
		t.Fatal(err)
	}
	done, generated := make(chan error, 1), make(chan struct{})
	go func() { done <- s.run(ctx, c.drain, log, func() { close(generated) }) }()
	select {
	case <-generated:
	case err := <-done:
		t.Fatalf("stopped before the demo data was generated: %v", err)
	}
	return s, c, done
}
