package odata_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/odata"
	"github.com/sluicehq/sluice/odata/query"
)

// The per-key limit slows a client down instead of failing it: these
// tests run the server with its production pacing (burst 4, one request
// in flight per key) on the real clock, at the production 2 requests/s
// where the rate is what is tested (the flood) and at testRate, four times
// it, where clients that do not pace themselves only need to be slowed
// and not failed: the same code paths, a quarter of the waiting.

func pacedOptions() odata.Options {
	o := testOptions()
	o.Sequential = true
	return o
}

// testRate is the per-key rate of the tests of unpaced clients.
const testRate = 8

func realLimiter(t *testing.T, perSecond uint32) *odata.LocalLimiter {
	t.Helper()
	lim, err := odata.NewLocalLimiter(odata.LocalLimiterOptions{RequestsPerSecond: perSecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	return lim
}

// Three official clients that do not pace themselves, each with its own
// key, make 12 calls back to back: the JavaScript one throws on anything
// but 200, the shell one cannot decode and reads a body without value as
// the end, the Python one cannot decode br. Each gets every row.
func TestClientsUnpaced(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			e := newEnv(t, b, clientData, pacedOptions(), realLimiter(t, testRate))
			type call struct {
				coll   *query.Collection
				params []kv
			}
			calls := []call{
				{query.Metadata, []kv{{"$top", "3"}}},
				{query.Metadata, []kv{{"$top", "10"}}},
				{query.Locations, []kv{{"$top", "5"}}},
				{query.Locations, []kv{{"$top", "10000"}, {"$select", "Id"}}},
			}
			for _, l := range e.data.locations[:8] {
				calls = append(calls, call{query.Observations, []kv{{"$top", "100"}, {"$filter", fmt.Sprintf("LocationId eq %d", l.ID)}}})
			}
			for _, c := range clients(e) {
				if c.name == "r" {
					continue // paces itself and throws like JavaScript
				}
				key, _, err := e.db.AddKey(context.Background(), c.name)
				if err != nil {
					t.Fatal(err)
				}
				c.key = key
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					for i, cl := range calls {
						var want []string
						if f := cl.params[len(cl.params)-1]; f.k == "$filter" {
							expr, err := query.ParseFilter(cl.coll, f.v)
							if err != nil {
								t.Fatal(err)
							}
							want = e.data.expected(cl.coll, expr)
						} else {
							want = e.data.expected(cl.coll, nil)
						}
						got := ids(c.fetch(t, "/"+cl.coll.Name, cl.params))
						if cl.coll != query.Metadata {
							got = sortIDs(got)
						}
						if !reflect.DeepEqual(got, want) {
							t.Fatalf("call %d %s %v: %d rows, want %d", i+1, cl.coll.Name, cl.params, len(got), len(want))
						}
					}
				})
			}
		})
	}
}

// An unpaced loop of 40 requests on one key is slowed to the key's rate
// (4 at once, then testRate a second) and refused none.
func TestPacingUnpacedLoop(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends()[0], smallData, pacedOptions(), realLimiter(t, testRate))
	c := newClient(t)
	var served []time.Time
	for i := range 40 {
		r := e.get(c, e.base+"/Locations?$top=1")
		if r.status != 200 {
			t.Fatalf("request %d: %d %s", i+1, r.status, r.body)
		}
		served = append(served, time.Now())
	}
	// The rate is a bound, not a schedule: however fast the loop, no
	// window of d seconds holds more than the burst and rate a second.
	const burst, rate = 4, testRate
	for i := range served {
		for j := i + 1; j < len(served); j++ {
			d := served[j].Sub(served[i]).Seconds()
			if n := j - i + 1; float64(n) > burst+rate*d+1 {
				t.Fatalf("%d requests served within %.2fs", n, d)
			}
		}
	}
	t.Logf("40 requests in %v", served[len(served)-1].Sub(served[0]).Round(time.Millisecond))
}

// A flood of 1,000 concurrent requests of one key: every one is answered,
// those over the queue bound at once with 429, Retry-After and an errors
// member, and no more than PaceQueue ever wait.
func TestPacingFlood(t *testing.T) {
	t.Parallel()
	opts := pacedOptions()
	e := newEnv(t, backends()[0], smallData, opts, realLimiter(t, 2))
	tr := &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: 1000, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr, Timeout: 60 * time.Second}

	stop := make(chan struct{})
	longest := make(chan int, 1)
	go func() {
		most := 0
		defer func() { longest <- most }()
		for {
			_, l := odata.Waiting(e.srv)
			most = max(most, l)
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const n = 1000
	statuses := make([]int, n)
	bodies := make([]string, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("GET", e.base+"/Locations?$top=1", nil)
			req.Header.Set("x-api-key", e.key)
			resp, err := hc.Do(req)
			if err != nil {
				bodies[i] = err.Error()
				return
			}
			defer resp.Body.Close()
			var b strings.Builder
			_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
			statuses[i], bodies[i] = resp.StatusCode, b.String()
			if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
				bodies[i] = "no Retry-After"
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stop)
	most := <-longest
	runtime.ReadMemStats(&after)

	ok, refused := 0, 0
	for i, st := range statuses {
		switch st {
		case 200:
			ok++
		case 429:
			refused++
			var body struct {
				Message string
				Errors  []struct{ Status int }
			}
			if err := json.Unmarshal([]byte(bodies[i]), &body); err != nil || body.Message != "Too Many Requests" || len(body.Errors) != 1 || body.Errors[0].Status != 429 {
				t.Fatalf("429 body %q", bodies[i])
			}
		default:
			t.Fatalf("request %d: status %d %q", i, st, bodies[i])
		}
	}
	if most > opts.PaceQueue {
		t.Errorf("%d requests of one key waited at once, bound %d", most, opts.PaceQueue)
	}
	if limit := 4 + 2*elapsed.Seconds() + 1; float64(ok) > limit {
		t.Errorf("%d served in %v, over the key's rate", ok, elapsed)
	}
	if refused == 0 {
		t.Error("no request was refused: the queue is not bounded")
	}
	t.Logf("%d served, %d refused in %v; longest queue %d; heap in use %+.1f MiB (test process: the server and its 1,000 clients)",
		ok, refused, elapsed.Round(time.Millisecond), most, float64(int64(after.HeapInuse)-int64(before.HeapInuse))/(1<<20))
}

// A client that goes away while it waits for its turn leaves the queue at
// once, not at the end of its wait; the server's shutdown answers those
// still waiting.
func TestPacingDisconnectAndShutdown(t *testing.T) {
	t.Parallel()
	opts := pacedOptions()
	opts.PaceWait = time.Minute // longer than the test waits
	e := newEnv(t, backends()[0], gen12k, opts, nil)

	// The key's turn is held by a response nobody reads yet.
	sr := openSlowRead(t, e.base+"/Records?$top=10000", e.key)
	defer sr.close()
	if sr.resp.StatusCode != 200 {
		t.Fatalf("first request: %d", sr.resp.StatusCode)
	}
	u, _ := url.Parse(e.base)
	waiter := func() net.Conn {
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET %s/Locations?$top=1 HTTP/1.1\r\nHost: %s\r\nx-api-key: %s\r\n\r\n", u.Path, u.Host, e.key)
		return conn
	}
	gone := waiter()
	testenv.Eventually(t, "the request to queue", func() bool { n, _ := odata.Waiting(e.srv); return n == 1 })
	gone.Close()
	testenv.Eventually(t, "the closed client to leave the queue", func() bool { n, _ := odata.Waiting(e.srv); return n == 0 })

	// Shutdown answers a waiting request 503 with Retry-After and closes
	// its connection; the slow reader is cut when the shutdown's own
	// bound ends.
	kept := waiter()
	defer kept.Close()
	testenv.Eventually(t, "the request to queue", func() bool { n, _ := odata.Waiting(e.srv); return n == 1 })
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		done <- e.srv.Shutdown(ctx)
	}()
	_ = kept.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(kept), nil)
	if err != nil {
		t.Fatalf("waiting request during shutdown: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !resp.Close {
		t.Fatalf("waiting request during shutdown: %d %v", resp.StatusCode, resp.Header)
	}
	sr.close()
	<-done
}
