package odata_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/odata"
	"github.com/sluicehq/sluice/odata/gen"
	"github.com/sluicehq/sluice/odata/sqlstore"
)

// openEmpty opens a store without data: enough for the tests of access
// and limits, whose requests need no rows (an empty page is a 200).
func openEmpty(t *testing.T, b backend) *sqlstore.DB {
	t.Helper()
	db, err := odata.OpenStore(context.Background(), b.dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// costlyFilter is an attacker's: 256 endswith terms, about 10 KB.
func costlyFilter() string {
	parts := make([]string, 256)
	for i := range parts {
		parts[i] = fmt.Sprintf("endswith(DOI,'%07d')", i)
	}
	return strings.Join(parts, " or ")
}

func filterURL(base, coll, filter string) string {
	return base + "/" + coll + "?$top=10&$filter=" + url.QueryEscape(filter)
}

// A filter over the budget is refused with 400 and a message naming its
// cost, before any SQL runs: the server's query budget is 1 ns, so any
// statement would answer 504.
func TestFilterBudget(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			db := openEmpty(t, b)
			key, _, _ := db.AddKey(context.Background(), "k")
			opts := testOptions()
			opts.QueryTimeout = time.Nanosecond
			_, noTime := startServer(t, db, opts, nil)
			_, base := startServer(t, db, testOptions(), nil)
			c := newClient(t)
			r := do(t, c, "GET", filterURL(noTime, "Observations", costlyFilter()), "x-api-key", key)
			if r.status != 400 {
				t.Fatalf("costly filter: %d %s", r.status, r.body)
			}
			d := errorDetail(t, 400, r.body)
			for _, want := range []string{"costs 2064 units", "budget of 256", "more than 16 alternatives"} {
				if !strings.Contains(d, want) {
					t.Fatalf("detail %q lacks %q", d, want)
				}
			}
			// The clients' forms are within the budget.
			for _, f := range []string{
				"CharacteristicName in ('pH','Titanium','Arsenic','Lead','Zinc','Copper','Iron','Nickel','Cadmium','Mercury','Tin','Boron','Barium','Cobalt','Silver','Sodium')",
				"LocationId eq 5 and CharacteristicName eq 'pH'",
				"contains(CharacteristicName,'pH') and ActivityStartYear ge 2000",
				"endswith(DOI,'x') or endswith(DOI,'y')",
			} {
				if r := do(t, c, "GET", filterURL(base, "Observations", f), "x-api-key", key); r.status != 200 {
					t.Fatalf("%s: %d %s", f, r.status, r.body)
				}
			}
			opts = testOptions()
			opts.FilterBudget = 0
			_, unbudgeted := startServer(t, db, opts, nil)
			if r := do(t, c, "GET", filterURL(unbudgeted, "Observations", costlyFilter()), "x-api-key", key); r.status != 200 {
				t.Fatalf("no budget: %d %s", r.status, r.body)
			}
		})
	}
}

// The data query cap stays below the pool: with every data slot held by a
// stalled page, more data requests get 503 with Retry-After at once, and
// key checks still get a connection (a key never seen before is checked,
// an unknown key gets 403), where they used to wait for the pool and fail.
func TestQueryCapKeepsKeyChecks(t *testing.T) {
	b := backends()[1]
	loaded := b.loaded
	b.loaded = func(t *testing.T, cfg gen.Config) string { return loaded(t, cfg) + "&pool_max_conns=4" }
	db, _ := openLoaded(t, b, gen12k)
	ctx := context.Background()
	var keys []string
	for i := range 4 {
		k, _, err := db.AddKey(ctx, fmt.Sprint("k", i))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	opts := testOptions()
	opts.SlotWait = 0 // 503 at once: the slots stay held by the stalled pages
	srv, base := startServer(t, db, opts, nil)
	if got := srv.MaxQueries(); got != 4-odata.KeyConns {
		t.Fatalf("derived cap %d, want %d", got, 4-odata.KeyConns)
	}
	var stalled []*slowRead
	for i := range 2 {
		sr := openSlowRead(t, base+"/Records?$top=10000", keys[i])
		defer sr.close()
		if sr.resp.StatusCode != 200 {
			t.Fatalf("stalled page %d: %d", i, sr.resp.StatusCode)
		}
		stalled = append(stalled, sr)
	}
	c := newClient(t)
	r := do(t, c, "GET", base+"/Locations?$top=1", "x-api-key", keys[2])
	if r.status != 503 || r.header.Get("Retry-After") != "1" || !strings.Contains(errorDetail(t, 503, r.body), "as many data queries as it allows (2)") {
		t.Fatalf("over the cap: %d %v %s", r.status, r.header, r.body)
	}
	// keys[3] was never checked: its check needs the database.
	if r := do(t, c, "GET", base+"/Locations?$top=1", "x-api-key", keys[3]); r.status != 503 {
		t.Fatalf("new key over the cap: %d %s", r.status, r.body)
	}
	if r := do(t, c, "GET", base+"/Locations?$top=1", "x-api-key", "no-such-key"); r.status != 403 {
		t.Fatalf("unknown key over the cap: %d %s", r.status, r.body)
	}
	for _, sr := range stalled {
		sr.close()
	}
	testenv.Eventually(t, "a data slot", func() bool {
		return do(t, c, "GET", base+"/Locations?$top=1", "x-api-key", keys[2]).status == 200
	})
}

// Checked keys are cached for KeyCacheTTL, and a revocation takes effect
// once it has passed.
func TestKeyCache(t *testing.T) {
	db := openEmpty(t, backends()[0])
	ctx := context.Background()
	a, _, _ := db.AddKey(ctx, "a")
	b, _, _ := db.AddKey(ctx, "b")
	long := testOptions()
	long.KeyCacheTTL = time.Hour
	_, cached := startServer(t, db, long, nil)
	short := testOptions()
	short.KeyCacheTTL = 200 * time.Millisecond
	_, expiring := startServer(t, db, short, nil)
	c := newClient(t)
	get := func(base, key string) int { return do(t, c, "GET", base+"/Locations?$top=1", "x-api-key", key).status }
	if get(cached, a) != 200 || get(expiring, b) != 200 {
		t.Fatal("keys refused before revocation")
	}
	for _, name := range []string{"a", "b"} {
		if n, err := db.RevokeKey(ctx, name); err != nil || n != 1 {
			t.Fatalf("revoke %s: %d %v", name, n, err)
		}
	}
	if s := get(cached, a); s != 200 {
		t.Fatalf("cached key after revocation: %d, want 200 until the TTL passes", s)
	}
	testenv.Eventually(t, "the revocation to take effect after the TTL", func() bool { return get(expiring, b) == 403 })
}

// Failed key checks are throttled per client address: after KeyFailures
// of them, further checks answer 429 without a lookup; keys already
// checked (cached) still pass.
func TestFailedKeyThrottle(t *testing.T) {
	db := openEmpty(t, backends()[0])
	key, _, _ := db.AddKey(context.Background(), "k")
	opts := testOptions()
	opts.KeyFailures = 3
	opts.KeyFailureWindow = time.Hour
	_, base := startServer(t, db, opts, nil)
	c := newClient(t)
	if r := do(t, c, "GET", base+"/Locations?$top=1", "x-api-key", key); r.status != 200 {
		t.Fatalf("valid key: %d", r.status)
	}
	for i, want := range []int{403, 403, 403, 429, 429} {
		r := do(t, c, "GET", base+"/Locations?$top=1", "x-api-key", fmt.Sprint("bad-", i))
		if r.status != want {
			t.Fatalf("bad key %d: %d, want %d", i, r.status, want)
		}
		if want == 429 {
			s, err := strconv.Atoi(r.header.Get("Retry-After"))
			if err != nil || s < 1 || s > 3600 {
				t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
			}
		}
	}
	if r := do(t, c, "GET", base+"/Locations?$top=1", "x-api-key", key); r.status != 200 {
		t.Fatalf("cached valid key from the throttled address: %d", r.status)
	}
}

// clientFrom makes requests from a given loopback address.
func clientFrom(t *testing.T, ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DisableCompression: true, DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

// openStalledFrom starts a page from ip with headers and does not read it.
func openStalledFrom(t *testing.T, target, ip string, headers ...string) *slowRead {
	t.Helper()
	u, _ := url.Parse(target)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	conn, err := d.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.(*net.TCPConn).SetReadBuffer(256 << 10)
	req, _ := http.NewRequest("GET", target, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	req.Header.Set("Connection", "close")
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4096), req)
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	sr := &slowRead{conn: conn, resp: resp}
	t.Cleanup(sr.close)
	return sr
}

// Browser access (an allowed Origin, no key) is limited per origin and
// client address: a slow reader sending that Origin does not lock out the
// origin's other users, and the origin as a whole has its own cap.
func originPerAddress(t *testing.T, db *sqlstore.DB) {
	const origin = "https://app.example.org"
	opts := testOptions()
	opts.Sequential = true
	opts.CORSOrigins = []string{origin}
	opts.OriginMaxInFlight = 2
	opts.PaceWait = 0 // a request behind one in flight is refused at once
	_, base := startServer(t, db, opts, nil)
	page := base + "/Records?$top=10000"
	if sr := openStalledFrom(t, page, "127.0.0.1", "Origin", origin); sr.resp.StatusCode != 200 {
		t.Fatalf("slow reader: %d", sr.resp.StatusCode)
	}
	small := base + "/Locations?$top=1"
	if r := do(t, clientFrom(t, "127.0.0.2"), "GET", small, "Origin", origin); r.status != 200 {
		t.Fatalf("another address of the origin: %d %s", r.status, r.body)
	}
	if r := do(t, clientFrom(t, "127.0.0.1"), "GET", small, "Origin", origin); r.status != 429 {
		t.Fatalf("the slow reader's own address: %d, want 429 (one request in flight)", r.status)
	}
	if sr := openStalledFrom(t, page, "127.0.0.2", "Origin", origin); sr.resp.StatusCode != 200 {
		t.Fatalf("second slow reader: %d", sr.resp.StatusCode)
	}
	if r := do(t, clientFrom(t, "127.0.0.3"), "GET", small, "Origin", origin); r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Fatalf("over the origin's cap: %d %v", r.status, r.header)
	}
}

// syncBuffer is a log sink shared by the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A remote rate limit service that cannot be reached does not turn the
// per-key limit off: the in-process limiter takes over, and says so once.
func TestRemoteLimiterFallback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	remote, err := odata.NewRemoteLimiter(odata.RemoteLimiterOptions{Target: dead, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer remote.Close()
	clock := testenv.NewClock(time.Unix(1_700_000_000, 250e6))
	local, err := odata.NewLocalLimiter(odata.LocalLimiterOptions{RequestsPerSecond: 2, Burst: 2, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	var logs syncBuffer
	lim := odata.NewFallbackLimiter(remote, local, slog.New(slog.NewTextHandler(&logs, nil)))
	db := openEmpty(t, backends()[0])
	key, _, _ := db.AddKey(context.Background(), "k")
	// Refused at once (PaceWait 0): the limiter's clock stands still, so a
	// paced request would wait out the whole PaceWait (10 s) for a token
	// that cannot come; the decisions, not the pacing, are tested here.
	opts := testOptions()
	opts.PaceWait = 0
	_, base := startServer(t, db, opts, lim)
	c := newClient(t)
	for i, want := range []int{200, 200, 429, 429, 429} {
		if r := do(t, c, "GET", base+"/Locations?$top=1", "x-api-key", key); r.status != want {
			t.Fatalf("request %d with the service down: %d, want %d", i+1, r.status, want)
		}
	}
	if !lim.Degraded() {
		t.Fatal("not degraded")
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "in-process limiter applies") {
		t.Fatalf("want one WARN line, got %d:\n%s", n, logs.String())
	}
}

// PostgreSQL down: 503 with Retry-After, for a key check and for a data
// query (not 500).
func TestStoreDown(t *testing.T) {
	pg := testenv.StartPostgres(t)
	if pg == nil {
		return
	}
	db := openEmpty(t, backend{name: "postgres", dsn: func(t *testing.T) string { return pg.CreateDatabase(t, "down") }})
	ctx := context.Background()
	cachedKey, _, _ := db.AddKey(ctx, "a")
	otherKey, _, _ := db.AddKey(ctx, "b")
	_, base := startServer(t, db, testOptions(), nil)
	c := newClient(t)
	if r := do(t, c, "GET", base+"/Locations?$top=1", "x-api-key", cachedKey); r.status != 200 {
		t.Fatalf("before: %d", r.status)
	}
	pg.Stop()
	for _, key := range []string{cachedKey, otherKey} {
		r := do(t, c, "GET", base+"/Locations?$top=1", "x-api-key", key)
		if r.status != 503 || r.header.Get("Retry-After") == "" || !strings.Contains(errorDetail(t, 503, r.body), "database is unavailable") {
			t.Fatalf("database down: %d %v %s", r.status, r.header, r.body)
		}
	}
}

// StreamTimeout bounds a whole body however slowly it is read: the page
// is cut and its connection returned.
func streamTimeout(t *testing.T, db *sqlstore.DB) {
	opts := testOptions()
	opts.StreamTimeout = 300 * time.Millisecond
	key, _, _ := db.AddKey(context.Background(), "k")
	_, base := startServer(t, db, opts, nil)
	sr := openSlowRead(t, base+"/Records?$top=10000", key)
	defer sr.close()
	if sr.resp.StatusCode != 200 {
		t.Fatalf("status %d", sr.resp.StatusCode)
	}
	testenv.Eventually(t, "the connection to return", func() bool { return db.InUse() == 0 })
	if _, err := io.Copy(io.Discard, sr.resp.Body); err == nil {
		t.Fatal("the timed-out body read to a clean end")
	}
}

// The tests that need pages too large to be buffered share one store.
func TestLargePageLimits(t *testing.T) {
	db, _ := openLoaded(t, backends()[0], gen12k)
	t.Run("origin per address", func(t *testing.T) { originPerAddress(t, db) })
	t.Run("stream timeout", func(t *testing.T) { streamTimeout(t, db) })
}

// Fifty clients that start a page and never read it (with keys, and with a
// forged browser Origin from many addresses) cannot keep a paying key out:
// its requests are served, each within the slot wait, because a response
// whose write waits on its client gives its data slot to a waiting request.
func TestStalledReadersLoseSlots(t *testing.T) {
	const origin = "https://app.example.org"
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			db, _ := openLoaded(t, b, gen12k)
			opts := testOptions()
			opts.Sequential = true
			opts.CORSOrigins = []string{origin}
			opts.OriginMaxInFlight = 0
			opts.MaxQueries = 6
			// Without preemption the stalled pages would hold their slots
			// for StallTimeout, far longer than the paying key tries
			// (testenv.EventuallyBound, generous for a loaded machine).
			opts.StallTimeout = 10 * time.Minute
			srv, base := startServer(t, db, opts, nil)
			ctx := context.Background()
			paying, _, err := db.AddKey(ctx, "paying")
			if err != nil {
				t.Fatal(err)
			}
			page := base + "/Records?$top=10000"
			type stall struct {
				conn   net.Conn
				status int
				err    error
			}
			stalls := make([]stall, 50)
			var wg sync.WaitGroup
			for i := range stalls {
				headers := []string{"Origin", origin}
				ip := fmt.Sprintf("127.0.1.%d", i+1)
				if i%2 == 0 {
					k, _, err := db.AddKey(ctx, fmt.Sprint("stall", i))
					if err != nil {
						t.Fatal(err)
					}
					headers, ip = []string{"x-api-key", k}, "127.0.0.1"
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					stalls[i].conn, stalls[i].status, stalls[i].err = startUnread(page, ip, headers...)
				}()
			}
			wg.Wait()
			held := 0
			for _, st := range stalls {
				if st.err != nil {
					t.Fatal(st.err)
				}
				defer st.conn.Close()
				switch st.status {
				case 200:
					held++
				case 503:
				default:
					t.Fatalf("stalled client: %d", st.status)
				}
			}
			// A holder is preempted once its write has waited StallPreempt on
			// its client, which first needs the socket buffers filled: on a
			// quiet machine well within the slot wait, under -race on a busy
			// one perhaps not. So the paying client does what a client does
			// with a 503, retry after Retry-After, within a bound far below
			// StallTimeout; the outcome is asserted, the time logged.
			c := newClient(t)
			var slowest time.Duration
			retries := 0
			for i := range 5 {
				start := time.Now()
				for {
					r := do(t, c, "GET", base+"/Observations?$top=100", "x-api-key", paying)
					if r.status == 200 {
						break
					}
					if r.status != 503 || time.Since(start) > testenv.EventuallyBound {
						t.Fatalf("paying request %d with %d slots of %d held by stalled pages: %d %s", i+1, srv.MaxQueries(), held, r.status, r.body)
					}
					retries++
					time.Sleep(time.Second) // its Retry-After
				}
				slowest = max(slowest, time.Since(start))
			}
			t.Logf("%d of 50 stalled pages got a slot; the paying key's slowest request took %v (%d retries after 503)", held, slowest.Round(time.Millisecond), retries)
		})
	}
}

// startUnread sends GET target from ip and reads the response's head only.
func startUnread(target, ip string, headers ...string) (net.Conn, int, error) {
	u, _ := url.Parse(target)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	conn, err := d.Dial("tcp", u.Host)
	if err != nil {
		return nil, 0, err
	}
	_ = conn.(*net.TCPConn).SetReadBuffer(64 << 10)
	req, _ := http.NewRequest("GET", target, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4096), req)
	if err != nil {
		conn.Close()
		return nil, 0, err
	}
	return conn, resp.StatusCode, nil
}
