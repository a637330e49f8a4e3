package odata_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/odata"
	"github.com/sluicehq/sluice/odata/gen"
)

// gen12k has more than one full page of 10,000 rows.
var gen12k = gen.Config{Rows: 12000, Datasets: 6, Locations: 60, Seed: 3}

// slowRead is a response read by hand over a connection with a bounded
// receive buffer, so the test controls how fast the server may write. (A
// buffer below the loopback MSS, about 64 KiB, would make TCP itself crawl.)
type slowRead struct {
	conn net.Conn
	resp *http.Response
}

func openSlowRead(t *testing.T, target, key string) *slowRead {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(256 << 10)
	}
	req, _ := http.NewRequest("GET", target, nil)
	req.Header.Set("x-api-key", key)
	req.Header.Set("Connection", "close")
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4096), req)
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	return &slowRead{conn: conn, resp: resp}
}

func (s *slowRead) close() { s.conn.Close() }

// drain reads the rest of the body and returns its length.
func (s *slowRead) drain(t *testing.T) int64 {
	t.Helper()
	n, err := io.Copy(io.Discard, s.resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return n
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// throttled hands a reader's bytes out a few at a time and samples the heap
// every so often, like a client that processes rows slowly.
type throttled struct {
	r       io.Reader
	read    int64
	next    int64
	maxHeap uint64
}

func (th *throttled) Read(p []byte) (int, error) {
	if len(p) > 2048 {
		p = p[:2048]
	}
	n, err := th.r.Read(p)
	th.read += int64(n)
	if th.read >= th.next {
		th.next += 256 << 10
		if h := heapInUse(); h > th.maxHeap {
			th.maxHeap = h
		}
	}
	return n, err
}

// A slow reader of a 10,000-row page: the server's memory stays flat (it
// never holds more than a small buffer of the page), and every row arrives.
func TestSlowReaderMemoryFlat(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			e := newEnv(t, b, gen12k, testOptions(), nil)
			sr := openSlowRead(t, e.base+"/Records?$top=10000", e.key)
			defer sr.close()
			before := heapInUse() // the response has started: the page is decided
			if sr.resp.StatusCode != 200 || sr.resp.Header.Get("Link") == "" {
				t.Fatalf("status %d, Link %q", sr.resp.StatusCode, sr.resp.Header.Get("Link"))
			}
			th := &throttled{r: sr.resp.Body}
			dec := json.NewDecoder(th)
			rows := 0
			// Walk the tokens so that no row is kept.
			depth := 0
			for {
				tok, err := dec.Token()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("after %d bytes: %v", th.read, err)
				}
				switch tok {
				case json.Delim('{'):
					depth++
					if depth == 2 {
						rows++
					}
				case json.Delim('}'):
					depth--
				}
			}
			if rows != 10000 {
				t.Fatalf("%d rows, want 10000", rows)
			}
			growth := int64(th.maxHeap) - int64(before)
			t.Logf("page %d bytes, heap growth at most %d bytes", th.read, growth)
			if th.read < 8<<20 {
				t.Fatalf("the page is only %d bytes; the test needs a page well above the bound", th.read)
			}
			if growth > 4<<20 {
				t.Fatalf("heap grew by %d bytes while a %d-byte page was read slowly", growth, th.read)
			}
			runtime.KeepAlive(e) // the oracle stays live, so the baseline holds
		})
	}
}

// A client that disconnects mid-page: the database connection goes back to
// the pool and the caller's turn is released.
func TestDisconnectFreesConnection(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			opts := testOptions()
			opts.Sequential = true
			e := newEnv(t, b, gen12k, opts, nil)
			sr := openSlowRead(t, e.base+"/Records?$top=10000", e.key)
			buf := make([]byte, 32<<10)
			if _, err := io.ReadFull(sr.resp.Body, buf); err != nil {
				t.Fatal(err)
			}
			if e.db.InUse() == 0 {
				t.Fatal("no connection in use while the page is open")
			}
			sr.close()
			testenv.Eventually(t, "the connection to return", func() bool { return e.db.InUse() == 0 })
			c := newClient(t)
			testenv.Eventually(t, "the turn to be released", func() bool {
				return e.get(c, e.base+"/Locations?$top=1").status == 200
			})
		})
	}
}

func TestHeadAndCompression(t *testing.T) {
	e := newEnv(t, backends()[0], smallData, testOptions(), nil)
	c := newClient(t)
	target := e.base + "/Observations?$top=300"
	plain := e.get(c, target)
	if plain.status != 200 || plain.header.Get("Content-Encoding") != "" {
		t.Fatalf("identity: %d %v", plain.status, plain.header)
	}

	head := do(t, c, "HEAD", target, "x-api-key", e.key)
	if head.status != 200 || len(head.body) != 0 || head.header.Get("Link") != plain.header.Get("Link") ||
		head.header.Get("Content-Type") != "application/json; charset=utf-8" {
		t.Fatalf("HEAD: %d %v %d bytes", head.status, head.header, len(head.body))
	}

	// Each coding decodes (once) to the identity body; q-values decide.
	// br is the operator's choice (off by default), and never the answer
	// to a request that offers br alone.
	brOpts := testOptions()
	brOpts.Brotli = true
	_, brBase := startServer(t, e.db, brOpts, nil)
	plainBr := do(t, c, "GET", brBase+"/Observations?$top=300", "x-api-key", e.key)
	for _, tc := range []struct{ accept, want, wantBr string }{
		{"gzip, deflate", "gzip", "gzip"},
		{"br", "", ""},
		{"br;q=1, identity", "", ""},
		{"gzip, deflate, br", "gzip", "br"},
		{"zstd", "zstd", "zstd"},
		{"zstd, br", "zstd", "br"},
		{"br;q=0.5, zstd;q=0.9, gzip;q=0.1", "zstd", "zstd"},
		{"br;q=0.9, gzip;q=0.5", "gzip", "br"},
		{"gzip;q=0", "", ""},
		{"br;q=0, gzip", "gzip", "gzip"},
		{"*", "zstd", "br"},
		{"*;q=0.2, br;q=0", "zstd", "zstd"},
		{"identity", "", ""},
		{"deflate", "", ""},
	} {
		for _, srv := range []struct {
			base, want string
			plain      []byte
		}{{e.base, tc.want, plain.body}, {brBase, tc.wantBr, plainBr.body}} {
			raw := do(t, c, "GET", srv.base+"/Observations?$top=300", "x-api-key", e.key, "Accept-Encoding", tc.accept)
			if got := raw.header.Values("Content-Encoding"); len(got) > 1 || raw.header.Get("Content-Encoding") != srv.want {
				t.Errorf("%s Accept-Encoding %q: Content-Encoding %q, want %q", srv.base, tc.accept, got, srv.want)
			}
			if !bytes.Equal(raw.body, srv.plain) {
				t.Errorf("%s Accept-Encoding %q: decoded body differs from identity (%d vs %d bytes)", srv.base, tc.accept, len(raw.body), len(srv.plain))
			}
			if !strings.Contains(strings.Join(raw.header.Values("Vary"), ", "), "Accept-Encoding") {
				t.Errorf("Accept-Encoding %q: Vary %q", tc.accept, raw.header.Get("Vary"))
			}
		}
	}
	// Switched off, a coding is not answered whatever the client says.
	opts := testOptions()
	opts.Brotli, opts.Zstd = false, false
	_, base := startServer(t, e.db, opts, nil)
	for _, accept := range []string{"br", "zstd", "br, zstd"} {
		r := do(t, c, "GET", base+"/Observations?$top=300", "x-api-key", e.key, "Accept-Encoding", accept)
		if r.header.Get("Content-Encoding") != "" {
			t.Errorf("%q with br and zstd off: %q", accept, r.header.Get("Content-Encoding"))
		}
	}
	if r := do(t, c, "GET", base+"/Observations?$top=300", "x-api-key", e.key, "Accept-Encoding", "br, gzip"); r.header.Get("Content-Encoding") != "gzip" {
		t.Errorf("br, gzip with br off: %q", r.header.Get("Content-Encoding"))
	}
}

// Shutdown while a client has stopped reading: the response is cut when
// the context ends, its database connection is returned, and every
// goroutine of the server ends (goleak checks at exit).
func TestShutdownCutsStalledResponse(t *testing.T) {
	b := backends()[0]
	db, _ := openLoaded(t, b, gen12k)
	key, _, _ := db.AddKey(context.Background(), "k")
	srv, err := odata.NewServer(testOptions(), db, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	base := "http://" + ln.Addr().String() + "/v1/odata/v4"
	sr := openSlowRead(t, base+"/Records?$top=10000", key)
	defer sr.close()
	if sr.resp.StatusCode != 200 {
		t.Fatalf("status %d", sr.resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := srv.Shutdown(ctx); err == nil {
		t.Fatal("Shutdown reported no cut response")
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	testenv.Eventually(t, "the connection to return", func() bool { return db.InUse() == 0 })
	if _, err := io.Copy(io.Discard, sr.resp.Body); err == nil {
		t.Fatal("the cut body read to a clean end")
	}
}
