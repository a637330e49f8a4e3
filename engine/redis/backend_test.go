package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
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

// singleOptions points the backend at r's plain port (or socket).
func singleOptions(r *testenv.Redis) Options {
	o := DefaultOptions()
	o.SocketType, o.URL = "tcp", r.Addr
	if r.Socket != "" {
		o.SocketType, o.URL = "unix", r.Socket
	}
	o.StartupInitialInterval, o.StartupMaxInterval, o.StartupMaxElapsed = 10*time.Millisecond, 100*time.Millisecond, 5*time.Second
	return o
}

func newBackend(t testing.TB, o Options) *Backend {
	t.Helper()
	b, err := New(testCtx(t), o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// checkCounters increments each key twice (hits, then hits again) and
// checks After and the stored value and TTL with an independent client.
func checkCounters(t *testing.T, b *Backend, check goredis.Cmdable, prefix string, n int) {
	t.Helper()
	ctx := testCtx(t)
	batch := make([]engine.CounterOp, n)
	for i := range batch {
		batch[i] = engine.Add(fmt.Sprintf("%s_%d", prefix, i), uint64(i+1), time.Duration(60+i)*time.Second)
	}
	var sent, answered time.Time // the last round: when its EXPIREs ran
	for round := 1; round <= 2; round++ {
		sent = time.Now()
		err := b.Exec(ctx, batch)
		answered = time.Now()
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i, inc := range batch {
			if want := uint64(round * (i + 1)); inc.After != want {
				t.Fatalf("round %d key %s: After = %d, want %d", round, inc.Key, inc.After, want)
			}
		}
	}
	for i, inc := range batch {
		v, err := check.Get(ctx, inc.Key).Result()
		if err != nil || v != strconv.Itoa(2*(i+1)) {
			t.Fatalf("GET %s = %q, %v; want %d", inc.Key, v, err, 2*(i+1))
		}
		checkExpiry(t, check, inc.Key, inc.TTL, sent, answered)
	}
}

// checkExpiry checks that key expires ttl after a moment in [sent,
// answered], when the batch that set it ran. It reads the expiry the
// server stored (PEXPIRETIME), not the time left (TTL, which a loaded
// machine lowers while the test runs), so only the batch's own duration is
// allowed for: a wrong TTL fails whenever the batch took less than the
// difference. Server and test read the same machine's clock.
func checkExpiry(t *testing.T, c goredis.Cmdable, key string, ttl time.Duration, sent, answered time.Time) {
	t.Helper()
	at, err := c.PExpireTime(testCtx(t), key).Result()
	if err != nil {
		t.Fatalf("PEXPIRETIME %s: %v", key, err)
	}
	// Redis keeps milliseconds: allow the rounding of the two ends.
	least := time.Duration(sent.Add(ttl).UnixMilli()-1) * time.Millisecond
	most := time.Duration(answered.Add(ttl).UnixMilli()+1) * time.Millisecond
	if at < least || at > most {
		t.Fatalf("%s expires %v after the batch was sent (it took %v), want %v",
			key, time.UnixMilli(at.Milliseconds()).Sub(sent), answered.Sub(sent), ttl)
	}
}

func TestSingle(t *testing.T) {
	tests := []struct {
		name string
		srv  testenv.RedisOptions
		opts func(*Options, *testenv.Redis)
	}{
		{"tcp", testenv.RedisOptions{}, nil},
		{"requirepass", testenv.RedisOptions{Password: "s3cret"}, func(o *Options, _ *testenv.Redis) { o.Auth = "s3cret" }},
		{"acl user", testenv.RedisOptions{User: "alice", Password: "wonder"}, func(o *Options, _ *testenv.Redis) { o.Auth = "alice:wonder" }},
		{"password in url", testenv.RedisOptions{User: "alice", Password: "wonder"}, func(o *Options, r *testenv.Redis) {
			o.URL = "redis://alice:wonder@" + r.Addr
		}},
		{"unix socket", testenv.RedisOptions{Unix: true}, nil},
		{"tls", testenv.RedisOptions{TLS: true}, func(o *Options, r *testenv.Redis) {
			o.URL, o.TLS, o.TLSCACert, o.TLSCert, o.TLSKey = r.TLSAddr, true, r.CACert, r.ClientCert, r.ClientKey
		}},
		{"tls by hostname", testenv.RedisOptions{TLS: true}, func(o *Options, r *testenv.Redis) {
			o.URL = strings.Replace(r.TLSAddr, "127.0.0.1", "localhost", 1)
			o.TLS, o.TLSCACert, o.TLSCert, o.TLSKey = true, r.CACert, r.ClientCert, r.ClientKey
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := testenv.StartRedis(t, tc.srv)
			o := singleOptions(r)
			if tc.opts != nil {
				tc.opts(&o, r)
			}
			b := newBackend(t, o)
			checkCounters(t, b, r.Client(t), "single", 20)
		})
	}
}

func TestAuthFailure(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{Password: "right"})
	o := singleOptions(r)
	o.Auth = "wrong"
	o.StartupMaxElapsed = 200 * time.Millisecond
	_, err := New(testCtx(t), o)
	if err == nil {
		t.Fatal("New with a wrong password succeeded")
	}
	want := "timed out waiting for Redis connection to " + r.Addr + " after "
	if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("error %q, want prefix %q and the server's WRONGPASS", err, want)
	}
}

func TestHitsZeroReadsAndRefreshesTTL(t *testing.T) {
	ctx := testCtx(t)
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	b := newBackend(t, singleOptions(r))
	c := r.Client(t)
	if err := c.Set(ctx, "k", 7, 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	batch := []engine.CounterOp{engine.Add("k", 0, 90*time.Second), engine.Add("fresh", 0, 5*time.Second)}
	sent := time.Now()
	if err := b.Exec(ctx, batch); err != nil {
		t.Fatal(err)
	}
	answered := time.Now()
	if batch[0].After != 7 || batch[1].After != 0 {
		t.Fatalf("After = %d, %d; want 7, 0", batch[0].After, batch[1].After)
	}
	checkExpiry(t, c, "k", 90*time.Second, sent, answered) // refreshed by INCRBY 0
}

func TestRejectsBadIncrements(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	b := newBackend(t, singleOptions(r))
	for _, tc := range []struct {
		name string
		inc  engine.CounterOp
		want string
	}{
		{"zero ttl", engine.CounterOp{Key: "a", Hits: 1}, "TTL"},
		{"huge hits", engine.Add("a", 1<<63, time.Second), "int64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := b.Exec(testCtx(t), []engine.CounterOp{tc.inc})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if n := r.Client(t).Exists(testCtx(t), "a").Val(); n != 0 {
		t.Fatalf("a rejected batch wrote to Redis")
	}
}

func TestSubSecondTTLRoundsUp(t *testing.T) {
	ctx := testCtx(t)
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	b := newBackend(t, singleOptions(r))
	batch := []engine.CounterOp{engine.Add("k", 1, 1500*time.Millisecond)}
	sent := time.Now()
	if err := b.Exec(ctx, batch); err != nil {
		t.Fatal(err)
	}
	checkExpiry(t, r.Client(t), "k", 2*time.Second, sent, time.Now())
}

// commandStats reads calls per command and read events from the server.
func commandStats(t *testing.T, c *goredis.Client) (incrby, expire, reads int) {
	t.Helper()
	info, err := c.Info(testCtx(t), "commandstats", "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := func(cmd string) int {
		for _, line := range strings.Split(info, "\r\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
				n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				return n
			}
		}
		return 0
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_reads_processed:"); ok {
			reads, _ = strconv.Atoi(v)
		}
	}
	return calls("incrby"), calls("expire"), reads
}

func TestStartupRetry(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	r.Kill()
	o := singleOptions(r)
	o.StartupMaxElapsed = 0 // forever, bounded by ctx
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type result struct {
		b   *Backend
		err error
	}
	res := make(chan result, 1)
	go func() {
		b, err := New(ctx, o)
		res <- result{b, err}
	}()
	// New is retrying against the dead port; a few failed attempts first.
	select {
	case r := <-res:
		t.Fatalf("New returned before the server started: %v", r.err)
	case <-time.After(300 * time.Millisecond):
	}
	r.Restart(t)
	got := <-res
	if got.err != nil {
		t.Fatalf("New after the server came up: %v", got.err)
	}
	defer got.b.Close()
	batch := []engine.CounterOp{engine.Add("k", 3, time.Minute)}
	if err := got.b.Exec(ctx, batch); err != nil || batch[0].After != 3 {
		t.Fatalf("Exec = %v, After %d", err, batch[0].After)
	}
}

func TestStartupGivesUp(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	r.Kill()
	tests := []struct {
		name   string
		elapse time.Duration
		cancel bool
		prefix string
		is     error
	}{
		{"max elapsed", 200 * time.Millisecond, false, "timed out waiting for Redis connection to " + r.Addr + " after ", syscall.ECONNREFUSED},
		{"context", 0, true, "context cancelled while waiting for Redis connection to " + r.Addr, context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := singleOptions(r)
			o.StartupMaxElapsed = tc.elapse
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				time.AfterFunc(200*time.Millisecond, cancel)
			}
			_, err := New(ctx, o)
			if err == nil || !strings.HasPrefix(err.Error(), tc.prefix) || !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want prefix %q wrapping %v", err, tc.prefix, tc.is)
			}
		})
	}
}

func TestHealthFollowsConnections(t *testing.T) {
	for _, active := range []bool{false, true} {
		t.Run(fmt.Sprintf("active=%v", active), func(t *testing.T) {
			r := testenv.StartRedis(t, testenv.RedisOptions{})
			o := singleOptions(r)
			o.HealthCheckActiveConnection, o.HealthCheckInterval = active, 20*time.Millisecond
			b := newBackend(t, o)
			if !b.Healthy() {
				t.Fatal("unhealthy right after a successful start")
			}
			r.Kill()
			waitHealth := func(want bool) {
				t.Helper()
				testenv.Eventually(t, fmt.Sprintf("Healthy() = %v", want), func() bool { return b.Healthy() == want })
			}
			if !active {
				// Without the switch health ignores Redis, like the reference.
				if err := b.Exec(testCtx(t), []engine.CounterOp{engine.Add("k", 1, time.Minute)}); err == nil {
					t.Fatal("Exec against a dead server succeeded")
				}
				if !b.Healthy() {
					t.Fatal("unhealthy without HealthCheckActiveConnection")
				}
				return
			}
			waitHealth(false)
			r.Restart(t)
			waitHealth(true)
			if s := b.PoolStats(); s.Dials < 2 || s.Closes < 1 {
				t.Fatalf("pool stats %+v: want a reconnect counted", s)
			}
		})
	}
}

func TestClosed(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	o := singleOptions(r)
	o.HealthCheckActiveConnection = true
	b, err := New(testCtx(t), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := b.Exec(testCtx(t), []engine.CounterOp{engine.Add("k", 1, time.Second)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Exec after Close = %v", err)
	}
	if b.Healthy() {
		t.Fatal("healthy after Close")
	}
}

func TestCluster(t *testing.T) {
	ctx := testCtx(t)
	c := testenv.StartRedisCluster(t, 3)
	o := DefaultOptions()
	o.Type, o.SocketType, o.URL = "CLUSTER", "tcp", strings.Join(c.Addrs, ",")
	b := newBackend(t, o)
	checkCounters(t, b, c.Client(t), "cl", 300)
	for _, n := range c.Nodes {
		if size := n.Client(t).DBSize(ctx).Val(); size == 0 {
			t.Errorf("primary %s holds no counters", n.Addr)
		}
	}
}

// TestSentinelFailover increments in a bounded loop while the sentinels
// switch the master. Errors are expected around the switch; once the
// sentinels report the new master, increments must succeed again within 2 s
// and stay successful.
func TestSentinelFailover(t *testing.T) {
	g := testenv.StartSentinelGroup(t, testenv.RedisOptions{Password: "pw", SentinelPassword: "spw"})
	o := DefaultOptions()
	o.Type, o.URL = "sentinel", g.MasterName+","+strings.Join(g.Sentinels, ",")
	o.Auth, o.SentinelAuth = "pw", "spw"
	o.DialTimeout = time.Second
	b := newBackend(t, o)

	type outcome struct {
		at    time.Time
		err   error
		after uint64
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
	)
	stop := make(chan struct{})
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		const maxIterations = 200000
		deadline := time.Now().Add(45 * time.Second)
		for i := 0; i < maxIterations && time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			batch := []engine.CounterOp{engine.Add("failover", 1, time.Hour)}
			err := b.Exec(ctx, batch)
			cancel()
			mu.Lock()
			outcomes = append(outcomes, outcome{time.Now(), err, batch[0].After})
			mu.Unlock()
			if err != nil {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	snapshot := func() []outcome {
		mu.Lock()
		defer mu.Unlock()
		return append([]outcome(nil), outcomes...)
	}
	waitOutcomes := func(n int) {
		t.Helper()
		testenv.Eventually(t, fmt.Sprintf("%d increments through the failover", n), func() bool { return len(snapshot()) >= n })
	}
	waitOutcomes(50)
	g.Failover(t)
	switched := time.Now()
	// Run on until 3 s past the switch, or 500 more increments.
	before := len(snapshot())
	for time.Since(switched) < 3*time.Second && len(snapshot()) < before+500 {
		time.Sleep(10 * time.Millisecond)
	}
	waitOutcomes(before + 100)
	close(stop)
	<-loopDone

	var firstOKAfter time.Time
	var lastAfter uint64
	errs, errsBefore := 0, 0
	for _, oc := range snapshot() {
		if oc.at.Before(switched) {
			if oc.err != nil {
				errsBefore++
			}
			continue
		}
		if oc.err != nil {
			errs++
			if !firstOKAfter.IsZero() {
				t.Fatalf("error %v after increments had recovered", oc.err)
			}
			continue
		}
		if firstOKAfter.IsZero() {
			firstOKAfter = oc.at
		} else if oc.after <= lastAfter {
			t.Fatalf("counter went from %d to %d after the failover", lastAfter, oc.after)
		}
		lastAfter = oc.after
	}
	if firstOKAfter.IsZero() || firstOKAfter.Sub(switched) > 2*time.Second {
		t.Fatalf("no successful increment within 2s of the failover (first at %v)", firstOKAfter.Sub(switched))
	}
	t.Logf("%d increments, %d errors during the failover, %d after it; first success %v after it",
		len(snapshot()), errsBefore, errs, firstOKAfter.Sub(switched).Round(time.Millisecond))
	got, err := g.Primary.Client(t).Get(testCtx(t), "failover").Uint64()
	if err != nil || got != lastAfter {
		t.Fatalf("counter on the new primary = %d, %v; want the last After %d", got, err, lastAfter)
	}
}

// cmdCalls is the server's call count of one command (INFO commandstats).
func cmdCalls(t *testing.T, c *goredis.Client, cmd string) int {
	t.Helper()
	info, err := c.Info(testCtx(t), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// TestOpGet: a read is one GET in the same pipeline as the increments; it
// neither creates the key nor touches its value or TTL, and a missing key
// reads 0.
func TestOpGet(t *testing.T) {
	ctx := testCtx(t)
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	o := singleOptions(r)
	o.PoolSize = 1
	b := newBackend(t, o)
	c := r.Client(t)
	if err := c.Set(ctx, "held", 7, 100*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Exec(ctx, []engine.CounterOp{engine.Add("warm", 1, time.Minute)}); err != nil {
		t.Fatal(err)
	}
	get0, incr0, exp0 := cmdCalls(t, c, "get"), cmdCalls(t, c, "incrby"), cmdCalls(t, c, "expire")
	_, _, reads0 := commandStats(t, c)
	batch := []engine.CounterOp{
		{Key: "held", Kind: engine.OpGet, Hits: 5, TTL: time.Second}, // hits and TTL are ignored
		engine.Get("missing"),
		engine.Add("counted", 3, time.Minute),
		engine.Get("counted"), // after the increment, in batch order
	}
	if err := b.Exec(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if got := []uint64{batch[0].After, batch[1].After, batch[2].After, batch[3].After}; fmt.Sprint(got) != "[7 0 3 3]" {
		t.Fatalf("After = %v, want [7 0 3 3]", got)
	}
	_, _, reads1 := commandStats(t, c)
	if got := reads1 - reads0 - 1; got != 1 {
		t.Errorf("pipelines (server read events) = %d, want 1", got)
	}
	if g, i, e := cmdCalls(t, c, "get")-get0, cmdCalls(t, c, "incrby")-incr0, cmdCalls(t, c, "expire")-exp0; g != 3 || i != 1 || e != 1 {
		t.Errorf("GET %d INCRBY %d EXPIRE %d, want 3 1 1", g, i, e)
	}
	if v := c.Get(ctx, "held").Val(); v != "7" {
		t.Errorf("held = %q after a read, want 7", v)
	}
	if ttl := c.TTL(ctx, "held").Val(); ttl > 100*time.Second || ttl < 90*time.Second {
		t.Errorf("held TTL = %v after a read, want the 100s it had", ttl)
	}
	if n := c.Exists(ctx, "missing").Val(); n != 0 {
		t.Errorf("a read created the missing key")
	}

	// A value that is not a counter fails the batch, naming the key.
	if err := c.Set(ctx, "text", "abc", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	err := b.Exec(ctx, []engine.CounterOp{engine.Get("text")})
	if err == nil || !strings.Contains(err.Error(), `"text"`) {
		t.Fatalf("GET of a non-counter: err = %v", err)
	}
}

func TestOpGetCluster(t *testing.T) {
	ctx := testCtx(t)
	c := testenv.StartRedisCluster(t, 3)
	o := DefaultOptions()
	o.Type, o.SocketType, o.URL = "CLUSTER", "tcp", strings.Join(c.Addrs, ",")
	b := newBackend(t, o)
	const n = 30
	batch := make([]engine.CounterOp, 0, 2*n)
	for i := range n {
		batch = append(batch, engine.Add(fmt.Sprintf("g%d", i), uint64(i+1), time.Minute))
	}
	if err := b.Exec(ctx, batch); err != nil {
		t.Fatal(err)
	}
	batch = batch[:0]
	for i := range 2 * n { // half of them were never written
		batch = append(batch, engine.Get(fmt.Sprintf("g%d", i)))
	}
	if err := b.Exec(ctx, batch); err != nil {
		t.Fatal(err)
	}
	for i := range batch {
		want := uint64(0)
		if i < n {
			want = uint64(i + 1)
		}
		if batch[i].After != want {
			t.Fatalf("%s After = %d, want %d", batch[i].Key, batch[i].After, want)
		}
	}
	if n := c.Client(t).Exists(ctx, "g45").Val(); n != 0 {
		t.Fatal("a read created a key")
	}
}

// TestReadsAndBucketSteps: GET of a missing key is 0 and changes nothing;
// bucket steps on one key apply in batch order; after SCRIPT FLUSH (a
// restart or failover loses loaded scripts) the NOSCRIPT steps are rerun
// once, in order, and count once.
func TestReadsAndBucketSteps(t *testing.T) {
	ctx := testCtx(t)
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	b := newBackend(t, singleOptions(r))
	c := r.Client(t)
	now := time.Now().UnixMicro()
	step := func() engine.CounterOp {
		return engine.BucketStep("bucket", 1, engine.Bucket{Now: now, Interval: 1000, Burst: 2})
	}
	var sent time.Time
	for round, flush := range []bool{false, true} {
		if flush {
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			now += 10_000 // the bucket is full again
		}
		batch := []engine.CounterOp{engine.Get("missing"), step(), step(), step()}
		sent = time.Now()
		if err := b.Exec(ctx, batch); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		found := []uint64{batch[1].After, batch[2].After, batch[3].After}
		// First step finds the old TAT (0, or one that is past), the second
		// the first's, the third the second's and is refused (burst 2).
		if batch[0].After != 0 || found[1] != uint64(now+1000) || found[2] != uint64(now+2000) {
			t.Fatalf("round %d: GET %d, steps found %v", round, batch[0].After, found)
		}
		if v, err := c.Get(ctx, "bucket").Int64(); err != nil || v != now+2000 {
			t.Fatalf("round %d: stored TAT %d, %v; want %d", round, v, err, now+2000)
		}
		if n, _ := c.Exists(ctx, "missing").Result(); n != 0 {
			t.Fatal("GET created the key")
		}
	}
	// The TTL is the 2 ms owed + a minute from when the script ran; what
	// has passed since the batch was sent (a loaded machine) is allowed for.
	ttl := c.PTTL(ctx, "bucket").Val()
	if least := time.Minute + 2*time.Millisecond - time.Since(sent) - time.Millisecond; ttl < least || ttl > time.Minute+time.Second {
		t.Fatalf("bucket PTTL %v, want the 2 ms owed + a minute (at least %v after the time passed)", ttl, least)
	}
}

// Commands are built in pooled arrays (see call): a batch must go out in
// its own order, reads between increments included, and concurrent batches
// of every size must not see each other's keys, hits or TTLs.
func TestBatchesKeepOrderAndTheirOwnCommands(t *testing.T) {
	ctx := testCtx(t)
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	b := newBackend(t, singleOptions(r))
	c := r.Client(t)

	batch := []engine.CounterOp{
		engine.Get("ordered"),
		engine.Add("ordered", 2, time.Minute),
		engine.Add("other", 1, time.Hour),
		engine.Get("ordered"),
		engine.Get("other"),
	}
	sent := time.Now()
	if err := b.Exec(ctx, batch); err != nil {
		t.Fatal(err)
	}
	answered := time.Now()
	var got []uint64
	for _, op := range batch {
		got = append(got, op.After)
	}
	if want := []uint64{0, 2, 1, 2, 1}; !slices.Equal(got, want) {
		t.Fatalf("answers %v, want %v (each read sees the increments before it)", got, want)
	}
	checkExpiry(t, c, "other", time.Hour, sent, answered)

	const workers, rounds = 6, 40
	started := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 1; n <= rounds; n++ {
				// Sizes vary so pooled arrays are reused at other lengths.
				size := 1 + (n*7+w)%23
				batch := make([]engine.CounterOp, size)
				for i := range batch {
					batch[i] = engine.Add(fmt.Sprintf("w%d_k%d", w, i), uint64(w+1), time.Duration(100+w)*time.Second)
				}
				if err := b.Exec(ctx, batch); err != nil {
					errs <- err
					return
				}
				for i, op := range batch {
					if op.After%uint64(w+1) != 0 || op.After == 0 {
						errs <- fmt.Errorf("worker %d key %d: After %d is not its own count", w, i, op.After)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	ended := time.Now()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := 0; w < workers; w++ {
		for i := 0; i < 23; i++ {
			// Key i is in every batch of size > i.
			var want int
			for n := 1; n <= rounds; n++ {
				if 1+(n*7+w)%23 > i {
					want += w + 1
				}
			}
			key := fmt.Sprintf("w%d_k%d", w, i)
			if v, _ := c.Get(ctx, key).Int(); v != want {
				t.Fatalf("%s = %d, want %d", key, v, want)
			}
			if want > 0 {
				checkExpiry(t, c, key, time.Duration(100+w)*time.Second, started, ended)
			}
		}
	}
}
