package memcache

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func options(addrs ...string) Options {
	o := DefaultOptions()
	o.HostPorts = addrs
	o.HealthCheckInterval = 20 * time.Millisecond
	return o
}

func newBackend(t testing.TB, o Options) *Backend {
	t.Helper()
	b, err := New(testCtx(t), o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// waitApplied waits until n increments have been applied in the background.
func waitApplied(t *testing.T, b *Backend, n uint64) {
	t.Helper()
	testenv.Eventually(t, fmt.Sprintf("%d increments applied", n), func() bool { return b.Stats().Applied >= n })
}

// metaTTL asks memcached for a key's value and remaining TTL with the meta
// protocol ("mg key v t"); ok is false on a miss.
func metaTTL(t *testing.T, addr, key string) (value string, ttl int, ok bool) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "mg %s v t\r\n", key)
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(line)
	if fields[0] == "EN" {
		return "", 0, false
	}
	if fields[0] != "VA" {
		t.Fatalf("mg %s: %q", key, line)
	}
	for _, f := range fields[2:] {
		if v, ok := strings.CutPrefix(f, "t"); ok {
			ttl, _ = strconv.Atoi(v)
		}
	}
	data, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(data), ttl, true
}

func TestTwoNodes(t *testing.T) {
	m1, m2 := testenv.StartMemcached(t), testenv.StartMemcached(t)
	b := newBackend(t, options(m1.Addr, m2.Addr))
	ctx := testCtx(t)
	const n = 200
	batch := make([]engine.CounterOp, n)
	for i := range batch {
		batch[i] = engine.Add(fmt.Sprintf("two_%d", i), uint64(i%5+1), time.Minute)
	}
	for round := uint64(1); round <= 3; round++ {
		if err := b.Exec(ctx, batch); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i := range batch {
			if want := round * uint64(i%5+1); batch[i].After != want {
				t.Fatalf("round %d %s: After %d, want %d", round, batch[i].Key, batch[i].After, want)
			}
		}
		// The next GetMulti must see this round's increments.
		waitApplied(t, b, round*n)
	}
	perNode := map[string]int{}
	for i := range batch {
		found := 0
		for _, m := range []*testenv.Memcached{m1, m2} {
			v, ttl, ok := metaTTL(t, m.Addr, batch[i].Key)
			if !ok {
				continue
			}
			found++
			perNode[m.Addr]++
			if want := strconv.Itoa(3 * (i%5 + 1)); v != want {
				t.Fatalf("%s on %s = %q, want %s", batch[i].Key, m.Addr, v, want)
			}
			if ttl <= 0 || ttl > 60 {
				t.Fatalf("%s TTL = %d, want (0,60]", batch[i].Key, ttl)
			}
		}
		if found != 1 {
			t.Fatalf("%s is on %d nodes", batch[i].Key, found)
		}
	}
	if perNode[m1.Addr] == 0 || perNode[m2.Addr] == 0 {
		t.Fatalf("keys per node %v: want keys on both", perNode)
	}
}

func TestLongTTLIsAbsolute(t *testing.T) {
	m := testenv.StartMemcached(t)
	b := newBackend(t, options(m.Addr))
	batch := []engine.CounterOp{engine.Add("month", 2, 31*24*time.Hour)}
	if err := b.Exec(testCtx(t), batch); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, b, 1)
	v, ttl, ok := metaTTL(t, m.Addr, "month")
	if !ok || v != "2" {
		t.Fatalf("month = %q (found %v): a relative expiration over 30 days would have expired it at once", v, ok)
	}
	// The expiry is rounded up to a whole second, and memcached's clock
	// (which the TTL is read against) ticks once a second and may lag the
	// wall clock by up to a second: up to 2 s over the TTL is exact.
	if want := 31 * 24 * 3600; ttl < want-60 || ttl > want+2 {
		t.Fatalf("TTL %d, want about %d", ttl, want)
	}
}

func TestAddRace(t *testing.T) {
	m := testenv.StartMemcached(t)
	o := options(m.Addr)
	o.Workers = 1
	b := newBackend(t, o)
	other := memcache.New(m.Addr)
	defer other.Close()
	// Another replica creates the counter between our missed increment and
	// our add; the add must not overwrite it.
	b.testHookBeforeAdd = func(key string) {
		if err := other.Add(&memcache.Item{Key: key, Value: []byte("5"), Expiration: 60}); err != nil {
			t.Errorf("other replica's add: %v", err)
		}
	}
	batch := []engine.CounterOp{engine.Add("race", 3, time.Minute)}
	if err := b.Exec(testCtx(t), batch); err != nil || batch[0].After != 3 {
		t.Fatalf("Exec = %v, After %d", err, batch[0].After)
	}
	waitApplied(t, b, 1)
	it, err := other.Get("race")
	if err != nil || string(it.Value) != "8" {
		t.Fatalf("race = %v, %v; want 8 (5 from the other add + our 3)", it, err)
	}
	if s := b.Stats(); s.AddRaces != 1 || s.Failed != 0 {
		t.Fatalf("stats %+v, want one add race and no failure", s)
	}
}

// TestConcurrentSameKey lets many workers hit one fresh key at once, so
// increments miss and adds collide for real; the total must be exact.
func TestConcurrentSameKey(t *testing.T) {
	m := testenv.StartMemcached(t)
	o := options(m.Addr)
	o.Workers = 16
	b, err := New(testCtx(t), o)
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, perG = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				batch := []engine.CounterOp{engine.Add("hot", 1, time.Minute), engine.Add(fmt.Sprintf("cold_%d_%d", g, i), 1, time.Minute)}
				if err := b.Exec(context.Background(), batch); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	c := memcache.New(m.Addr)
	defer c.Close()
	it, err := c.Get("hot")
	if err != nil || string(it.Value) != strconv.Itoa(goroutines*perG) {
		t.Fatalf("hot = %v, %v; want %d", it, err, goroutines*perG)
	}
	t.Logf("stats %+v", b.Stats())
}

func TestBadKeysRejected(t *testing.T) {
	m := testenv.StartMemcached(t)
	b := newBackend(t, options(m.Addr))
	for _, tc := range []struct{ name, key, want string }{
		{"251 chars", strings.Repeat("k", 251), "over the 250-byte limit"},
		{"space", "probe_k_a b_1", "whitespace"},
		{"newline", "probe_k_a\nb_1", "whitespace"},
		{"control", "probe_k_a\x01b_1", "control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := b.ValidateKey(tc.key); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ValidateKey = %v, want %q", err, tc.want)
			}
			batch := []engine.CounterOp{engine.Add("good", 1, time.Minute), engine.Add(tc.key, 1, time.Minute)}
			if err := b.Exec(testCtx(t), batch); err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "probe_k_a") {
				t.Fatalf("Exec = %v, want %q without the key's text", err, tc.want)
			}
		})
	}
	if err := b.ValidateKey(strings.Repeat("k", 250)); err != nil {
		t.Fatalf("250-byte key rejected: %v", err)
	}
	if s := b.Stats(); s.Applied+s.Failed+uint64(s.Queued) != 0 {
		t.Fatalf("a rejected batch queued increments: %+v", s)
	}
}

func TestNonCounterValueFailsBatch(t *testing.T) {
	m := testenv.StartMemcached(t)
	b := newBackend(t, options(m.Addr))
	c := memcache.New(m.Addr)
	defer c.Close()
	if err := c.Set(&memcache.Item{Key: "text", Value: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(&memcache.Item{Key: "user_ann-secret-value", Value: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	err := b.Exec(testCtx(t), []engine.CounterOp{engine.Add("text", 1, time.Minute)})
	if err == nil || !strings.Contains(err.Error(), "not a counter") {
		t.Fatalf("err = %v", err)
	}
	// The key holds descriptor values: errors (and so logs) name it by hash.
	err = b.Exec(testCtx(t), []engine.CounterOp{engine.Add("user_ann-secret-value", 1, time.Minute)})
	if err == nil || strings.Contains(err.Error(), "ann-secret-value") || !strings.Contains(err.Error(), "sha256:") {
		t.Fatalf("err = %v, want the key named by hash", err)
	}
}

func TestServerDownFailsBatchAndHealth(t *testing.T) {
	m := testenv.StartMemcached(t)
	b := newBackend(t, options(m.Addr))
	ctx := testCtx(t)
	waitHealth := func(want bool) {
		t.Helper()
		testenv.Eventually(t, fmt.Sprintf("Healthy() = %v", want), func() bool { return b.Healthy() == want })
	}
	waitHealth(true)
	m.Kill()
	err := b.Exec(ctx, []engine.CounterOp{engine.Add("k", 1, time.Minute)})
	if err == nil || !strings.Contains(err.Error(), "GetMulti") {
		t.Fatalf("Exec against a dead server = %v, want a GetMulti error", err)
	}
	if !unreachable(err) {
		t.Fatalf("error %v does not wrap the transport error", err)
	}
	waitHealth(false)
	m.Restart(t)
	waitHealth(true)
	batch := []engine.CounterOp{engine.Add("k", 4, time.Minute)}
	if err := b.Exec(ctx, batch); err != nil || batch[0].After != 4 {
		t.Fatalf("after restart: %v, After %d", err, batch[0].After)
	}
}

func TestCloseDrains(t *testing.T) {
	m := testenv.StartMemcached(t)
	o := options(m.Addr)
	// Close waits for the queue however slowly a starved machine drains
	// it (2,000 increments overran the 5 s default under make
	// test-stress); giving up after DrainTimeout is TestCloseGivesUp's.
	o.Workers, o.QueueSize, o.DrainTimeout = 1, 10000, testenv.EventuallyBound
	b, err := New(testCtx(t), o)
	if err != nil {
		t.Fatal(err)
	}
	const batches, keys = 20, 100
	for i := range batches {
		batch := make([]engine.CounterOp, keys)
		for k := range batch {
			batch[k] = engine.Add(fmt.Sprintf("drain_%d", k), 1, time.Minute)
		}
		if err := b.Exec(testCtx(t), batch); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	queued := b.Stats().Queued
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s := b.Stats()
	if s.Applied != batches*keys || s.Dropped != 0 || s.Queued != 0 {
		t.Fatalf("after Close: %+v, want all %d applied", s, batches*keys)
	}
	c := memcache.New(m.Addr)
	defer c.Close()
	for k := range keys {
		it, err := c.Get(fmt.Sprintf("drain_%d", k))
		if err != nil || string(it.Value) != strconv.Itoa(batches) {
			t.Fatalf("drain_%d = %v, %v; want %d", k, it, err, batches)
		}
	}
	if err := b.Exec(testCtx(t), []engine.CounterOp{engine.Add("x", 1, time.Second)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Exec after Close = %v", err)
	}
	t.Logf("%d increments were still queued when Close began", queued)
}

// TestCloseGivesUp points the workers at a server that accepts connections
// and never answers, so the queue cannot drain; Close must return after
// DrainTimeout and report what it dropped.
func TestCloseGivesUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() { defer conns.Done(); _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	defer func() { ln.Close(); <-acceptDone; conns.Wait() }()

	o := options(ln.Addr().String())
	o.Workers, o.Timeout, o.DrainTimeout = 1, 300*time.Millisecond, 100*time.Millisecond
	o.HealthCheckInterval = time.Hour
	b, err := New(testCtx(t), o)
	if err != nil {
		t.Fatal(err)
	}
	if b.Healthy() {
		t.Fatal("healthy although the server never answered the ping")
	}
	// GetMulti cannot succeed here, so queue directly what a batch would.
	for i := range 5 {
		b.jobs <- job{key: fmt.Sprintf("k%d", i), hits: 1, expiration: 60}
	}
	err = b.Close()
	if err == nil || !strings.Contains(err.Error(), "dropped after 100ms") {
		t.Fatalf("Close = %v, want a report of dropped increments", err)
	}
	if s := b.Stats(); s.Dropped == 0 || s.Dropped+s.Failed+s.Applied != 5 {
		t.Fatalf("stats %+v: every increment must be accounted for", s)
	}
}

func TestTLS(t *testing.T) {
	m := testenv.StartMemcachedWith(t, testenv.MemcachedOptions{TLS: true})
	tests := []struct {
		name string
		mod  func(*Options)
		ok   bool
	}{
		{"client cert", func(o *Options) { o.TLSCert, o.TLSKey = m.ClientCert, m.ClientKey }, true},
		{"client cert, by hostname", func(o *Options) {
			o.HostPorts = []string{strings.Replace(m.Addr, "127.0.0.1", "localhost", 1)}
			o.TLSCert, o.TLSKey = m.ClientCert, m.ClientKey
		}, true},
		{"no client cert", func(*Options) {}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := options(m.Addr)
			o.TLS, o.TLSCACert = true, m.CACert
			tc.mod(&o)
			b := newBackend(t, o)
			batch := []engine.CounterOp{engine.Add("tls", 1, time.Minute)}
			err := b.Exec(testCtx(t), batch)
			if (err == nil) != tc.ok {
				t.Fatalf("Exec over TLS = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok {
				_ = b.Close()
				c := memcache.New(m.Addr)
				c.DialContext = (&tls.Dialer{Config: m.TLSConfig(t)}).DialContext
				defer c.Close()
				if _, err := c.Get("tls"); err != nil {
					t.Fatalf("counter not stored over TLS: %v", err)
				}
			}
		})
	}
}

func TestSRV(t *testing.T) {
	m1, m2 := testenv.StartMemcached(t), testenv.StartMemcached(t)
	port := func(m *testenv.Memcached) string { _, p, _ := net.SplitHostPort(m.Addr); return "localhost:" + p }
	const name = "_memcache._tcp.sluice.test"
	dns := startDNS(t, name, port(m1))

	t.Run("lookup failure", func(t *testing.T) {
		o := options()
		o.SRV, o.Resolver = "_memcache._tcp.missing.test", dns.resolver()
		_, err := New(testCtx(t), o)
		if err == nil || !strings.HasPrefix(err.Error(), "Unable to fetch servers from SRV") {
			t.Fatalf("New = %v", err)
		}
	})

	o := options()
	o.SRV, o.SRVRefresh, o.Resolver = name, 20*time.Millisecond, dns.resolver()
	b := newBackend(t, o)
	ctx := testCtx(t)
	if err := b.Exec(ctx, []engine.CounterOp{engine.Add("srv_a", 1, time.Minute)}); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, b, 1)
	if _, _, ok := metaTTL(t, m1.Addr, "srv_a"); !ok {
		t.Fatal("srv_a is not on the node the SRV record named")
	}
	// Point the record at the second node; the refresh loop must follow.
	dns.set(port(m2))
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		key := fmt.Sprintf("srv_b%d", i)
		if err := b.Exec(ctx, []engine.CounterOp{engine.Add(key, 1, time.Minute)}); err != nil {
			t.Fatal(err)
		}
		waitApplied(t, b, uint64(i+2))
		if _, _, ok := metaTTL(t, m2.Addr, key); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the backend never moved to the node of the refreshed SRV record")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOpGet: reads are part of the one GetMulti, queue no increment, and
// leave the stored value alone; a missing key reads 0.
func TestOpGet(t *testing.T) {
	m := testenv.StartMemcached(t)
	b := newBackend(t, options(m.Addr))
	ctx := testCtx(t)
	if err := b.Exec(ctx, []engine.CounterOp{engine.Add("held", 4, time.Minute)}); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, b, 1)
	batch := []engine.CounterOp{
		{Key: "held", Kind: engine.OpGet, Hits: 9, TTL: time.Second}, // hits and TTL are ignored
		engine.Get("missing"),
		engine.Add("counted", 2, time.Minute),
	}
	if err := b.Exec(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if batch[0].After != 4 || batch[1].After != 0 || batch[2].After != 2 {
		t.Fatalf("After = %d %d %d, want 4 0 2", batch[0].After, batch[1].After, batch[2].After)
	}
	waitApplied(t, b, 2)
	b.Close() // drains the queue: nothing else may have been queued
	if s := b.Stats(); s.Applied != 2 || s.Failed != 0 || s.Dropped != 0 {
		t.Fatalf("stats %+v, want exactly 2 increments applied", s)
	}
	if v, _, ok := metaTTL(t, m.Addr, "held"); !ok || v != "4" {
		t.Fatalf("held = %q (found %v) after a read, want 4", v, ok)
	}
	if _, _, ok := metaTTL(t, m.Addr, "missing"); ok {
		t.Fatal("a read created the missing key")
	}
}

// TestBucketStepsCompareAndSwap: replicas (here 4 goroutines, each its own
// backend) stepping one bucket at once lose CAS races and retry; the bucket
// admits exactly its burst, and a read (OpGet) returns a counter unchanged.
func TestBucketStepsCompareAndSwap(t *testing.T) {
	m := testenv.StartMemcached(t)
	now := time.Now().UnixMicro()
	const replicas, perReplica, burst = 4, 100, 150
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		admitted  int
		contended int // steps that lost every race: stored nothing
		firstErr  error
	)
	for range replicas {
		b := newBackend(t, options(m.Addr))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perReplica {
				// An hour per token: nothing comes back during the test.
				batch := []engine.CounterOp{engine.BucketStep("bucket", 1, engine.Bucket{Now: now, Interval: 3600e6, Burst: burst})}
				err := b.Exec(testCtx(t), batch)
				mu.Lock()
				switch {
				case errors.Is(err, errContended):
					// A starved machine can hold a step between its read
					// and its swap while others go through, 16 times over:
					// the backend's answer to contention, not a wrong count.
					contended++
				case err != nil && firstErr == nil:
					firstErr = err
				}
				// After is the TAT the step found; the engine decides from it.
				if _, ok := engine.TokenBucketStep(int64(batch[0].After), &batch[0]); err == nil && ok {
					admitted++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	// The burst is still reached however many steps gave up: each give-up
	// saw 16 stores by the 3 other replicas, so F give-ups need 16F ≤ 3A
	// admitted stores; and while fewer than 150 are admitted none is
	// refused, so A = 400 - F below 150 would need F > 250.
	if admitted != burst {
		t.Fatalf("%d steps admitted (%d gave up on contention), want the burst %d", admitted, contended, burst)
	}
	t.Logf("%d of %d steps gave up on contention", contended, replicas*perReplica)
	b := newBackend(t, options(m.Addr))
	batch := []engine.CounterOp{engine.Get("bucket"), engine.Get("absent")}
	if err := b.Exec(testCtx(t), batch); err != nil {
		t.Fatal(err)
	}
	if want := uint64(now + burst*3600e6); batch[0].After != want || batch[1].After != 0 {
		t.Fatalf("reads: %d %d, want %d 0", batch[0].After, batch[1].After, want)
	}
}
