package quota_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/alloc"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/testenv/memengine"
	"github.com/sluicehq/sluice/quota"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const rules1000 = memengine.Rules1000

// sink keeps what a stream was sent.
type sink struct {
	mu   sync.Mutex
	acts []quota.Action
	ch   chan struct{}
}

func newSink() *sink { return &sink{ch: make(chan struct{}, 1)} }

func (k *sink) Push(a []quota.Action) {
	k.mu.Lock()
	k.acts = append(k.acts, a...)
	k.mu.Unlock()
	select {
	case k.ch <- struct{}{}:
	default:
	}
}

func (k *sink) all() []quota.Action {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]quota.Action(nil), k.acts...)
}

// fixture is a quota service on the memory backend with rules.
type fixture struct {
	svc   *quota.Service
	st    *stats.Store
	clock *testenv.Clock
	// counters is what the memory backend's counters take.
	counters *memory.Budget
}

func newFixture(t testing.TB, o quota.Options, rules string, manual bool) *fixture {
	t.Helper()
	return newFixtureWith(t, o, rules, manual, nil)
}

// newFixtureWith is newFixture with the quota service's counter wrapped by
// wrap, when not nil.
func newFixtureWith(t testing.TB, o quota.Options, rules string, manual bool, wrap func(engine.Counter) engine.Counter) *fixture {
	t.Helper()
	ck := testenv.NewClock(time.Unix(1_700_000_000, 0))
	budget := memory.NewBudget(1 << 40)
	e := memengine.New(t, rules, memory.Options{Clock: ck.Now, Budget: budget})
	st, eng := e.Stats, e.Service
	var err error
	if manual {
		o.Clock = ck.Now
	}
	counter := e.Counter
	if wrap != nil {
		counter = wrap(counter)
	}
	var svc *quota.Service
	if manual {
		svc, err = quota.NewManual(o, eng, counter, nil, st)
	} else {
		svc, err = quota.New(o, eng, counter, nil, st)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return &fixture{svc: svc, st: st, clock: ck, counters: budget}
}

// users are n buckets' usages, from user u<from>, each with 10 requests
// allowed when elapsed is not zero (a periodic report).
func users(from, n int, elapsed time.Duration) []quota.Usage {
	u := make([]quota.Usage, n)
	for i := range u {
		u[i] = quota.Usage{Bucket: alloc.BucketOf(map[string]string{"user": fmt.Sprint("u", from+i)}), Elapsed: elapsed}
		if elapsed > 0 {
			u[i].Allowed = 10
		}
	}
	return u
}

// idle are users' usages with no requests.
func idle(from, n int, elapsed time.Duration) []quota.Usage {
	u := users(from, n, elapsed)
	for i := range u {
		u[i].Allowed = 0
	}
	return u
}

func TestAssignsATokenBucketEnvoyKeepsPastItsReportTimer(t *testing.T) {
	f := newFixture(t, quota.DefaultOptions(), rules1000, true)
	k := newSink()
	st := f.svc.Open(k)
	if err := st.Report(f.clock.Now(), "q", users(0, 1, 0)); err != nil {
		t.Fatal(err)
	}
	acts := k.all()
	if len(acts) != 1 || acts[0].Abandon || acts[0].Strategy.Kind != alloc.TokenBucket {
		t.Fatalf("a new bucket under a 1000/s rule: want one token-bucket assignment, got %+v", acts)
	}
	// Envoy's global client reports every 5 s (filter_persistence.cc) and
	// drops an assignment at its TTL: it must outlive the next report and
	// the renewal's way back.
	if ttl := acts[0].TTL; ttl <= 5*time.Second || ttl%time.Second != 0 {
		t.Errorf("TTL %v: want whole seconds, more than Envoy's 5 s report period", ttl)
	}
	if r := acts[0].Strategy.Rate(); r <= 0 || r > 1000 {
		t.Errorf("rate %v/s: want within the rule's 1000/s", r)
	}
}

func TestBadReportsNameWhatIsWrong(t *testing.T) {
	f := newFixture(t, quota.DefaultOptions(), rules1000, true)
	st := f.svc.Open(newSink())
	now := f.clock.Now()
	for _, tc := range []struct {
		name   string
		domain string
		usages []quota.Usage
		want   string
	}{
		{"no domain", "", users(0, 1, 0), "must name its domain"},
		{"empty bucket id", "q", []quota.Usage{{}}, "bucket_id has no entries"},
		{"empty value", "q", []quota.Usage{{Bucket: alloc.BucketOf(map[string]string{"user": ""})}}, "empty key or value"},
		{"negative elapsed", "q", []quota.Usage{{Bucket: alloc.BucketOf(map[string]string{"user": "a"}), Elapsed: -time.Second}}, "negative time_elapsed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := st.Report(now, tc.domain, tc.usages)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if err := st.Report(now, "q", users(0, 1, 0)); err != nil {
		t.Fatal(err)
	}
	if err := st.Report(now, "other", users(0, 1, 0)); err == nil || !strings.Contains(err.Error(), `domain "other"`) {
		t.Fatalf("a second domain on a stream: got %v", err)
	}
}

// TestBucketsBeyondTheCapsAreAnsweredOnce replays the loop: a
// stream past SLUICE_RLQS_MAX_BUCKETS was sent abandon_action, subscribed
// again at once and was abandoned again (3,046 abandons in 15 s), falling
// back to ALLOW_ALL meanwhile. A refused bucket is answered with the
// refused rule for RefusedTTL when it subscribes, again only every half
// RefusedTTL, and never abandoned.
func TestBucketsBeyondTheCapsAreAnsweredOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    func(*quota.Options)
		// streams × buckets each
		streams, buckets int
		tracked          int
	}{
		{"per stream", func(o *quota.Options) { o.MaxBuckets = 3 }, 1, 5, 3},
		{"whole service", func(o *quota.Options) { o.MaxReporters = 4 }, 2, 3, 4},
		{"memory cap", func(o *quota.Options) { o.Budget = memory.NewBudget(4 * quota.ReporterBytes) }, 2, 3, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := quota.DefaultOptions()
			tc.o(&o)
			f := newFixture(t, o, rules1000, true)
			sinks := make([]*sink, tc.streams)
			streams := make([]*quota.Stream, tc.streams)
			for i := range streams {
				sinks[i] = newSink()
				streams[i] = f.svc.Open(sinks[i])
			}
			start := f.clock.Now()
			for i, st := range streams {
				if err := st.Report(start, "q", users(i*tc.buckets, tc.buckets, 0)); err != nil {
					t.Fatal(err)
				}
			}
			// A minute of periodic reports every 5 s.
			for p := 1; p <= 12; p++ {
				now := start.Add(time.Duration(p) * 5 * time.Second)
				f.clock.Set(now)
				f.svc.Advance(now)
				for i, st := range streams {
					if err := st.Report(now, "q", users(i*tc.buckets, tc.buckets, 5*time.Second)); err != nil {
						t.Fatal(err)
					}
				}
			}
			refused, abandons := 0, 0
			for _, k := range sinks {
				for _, a := range k.all() {
					if a.Abandon {
						abandons++
					}
					if !a.Abandon && a.Strategy.Kind == alloc.DenyAll && a.TTL == o.RefusedTTL {
						refused++
					}
				}
			}
			over := tc.streams*tc.buckets - tc.tracked
			if abandons != 0 {
				t.Errorf("%d abandon actions: a refused bucket must not loop through abandon and subscribe", abandons)
			}
			// Once at subscription, once more at the stream's first
			// periodic report (the sweep): at most twice each.
			if refused < over || refused > 2*over {
				t.Errorf("%d refused answers for %d buckets over the cap: want each answered once or twice in a minute", refused, over)
			}
			if g := f.st.Gauge("ratelimit.rlqs.reporters").Value(); g != int64(tc.tracked) {
				t.Errorf("reporters gauge %d, want %d", g, tc.tracked)
			}
			// Each bucket has one stream: a refused one leaves no hub
			// (one made before the memory budget refused its reporter
			// stayed, reporterless: a flood's 317,000 hubs for 87,000
			// reporters).
			if g := f.st.Gauge("ratelimit.rlqs.buckets").Value(); g != int64(tc.tracked) {
				t.Errorf("buckets gauge %d, want %d (one per tracked bucket)", g, tc.tracked)
			}
		})
	}
}

// TestClosedStreamsLeaveNothingBehind: when every stream has closed, the
// service forgets every bucket once what their Envoys were sent has
// expired (they stay counted until then: an Envoy enforces what it has).
func TestClosedStreamsLeaveNothingBehind(t *testing.T) {
	o := quota.DefaultOptions()
	o.Budget = memory.NewBudget(1 << 30)
	f := newFixture(t, o, rules1000, true)
	start := f.clock.Now()
	var streams []*quota.Stream
	var sinks []*sink
	for i := range 20 {
		k := newSink()
		st := f.svc.Open(k)
		streams, sinks = append(streams, st), append(sinks, k)
		if err := st.Report(start, "q", users(i*50, 50, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if g := f.st.Gauge("ratelimit.rlqs.reporters").Value(); g != 1000 {
		t.Fatalf("reporters gauge %d after 20 streams × 50 buckets, want 1000", g)
	}
	for _, st := range streams {
		st.Close()
	}
	if g := f.st.Gauge("ratelimit.rlqs.streams").Value(); g != 0 {
		t.Errorf("streams gauge %d after every stream closed, want 0", g)
	}
	var ttl time.Duration
	for _, k := range sinks {
		for _, a := range k.all() {
			ttl = max(ttl, a.TTL)
		}
	}
	end := start.Add(ttl + 2*time.Second)
	for now := start; !now.After(end); now = now.Add(500 * time.Millisecond) {
		f.clock.Set(now)
		f.svc.Advance(now)
	}
	if used := o.Budget.Used(); used != 0 {
		t.Errorf("%d bytes still charged to the memory cap", used)
	}
	for _, name := range []string{"ratelimit.rlqs.reporters", "ratelimit.rlqs.buckets"} {
		if g := f.st.Gauge(name).Value(); g != 0 {
			t.Errorf("%s gauge %d a TTL after every stream closed, want 0", name, g)
		}
	}
}

// tallyCounter tallies, per counter key, the hits the store granted to
// reservations (of a limit of 1,000) and those given back.
type tallyCounter struct {
	engine.Counter
	mu                sync.Mutex
	granted, released map[string]uint64
}

func (g *tallyCounter) Apply(ctx context.Context, ops []engine.CounterOp, b engine.Batch) error {
	if err := g.Counter.Apply(ctx, ops, b); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range ops {
		switch op := &ops[i]; op.Kind {
		case engine.OpReserve:
			n, _ := engine.Granted(op, 1000)
			g.granted[op.Key] += n
		case engine.OpRelease:
			g.released[op.Key] += op.Hits
		}
	}
	return nil
}

// unreturned is what was granted and not given back, per key.
func (g *tallyCounter) unreturned() map[string]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	left := map[string]uint64{}
	for k, n := range g.granted {
		if n > g.released[k] {
			left[k] = n - g.released[k]
		}
	}
	return left
}

// TestBucketWhoseStreamClosedMidReservationIsForgotten: a stream that
// subscribes a bucket and closes while the bucket's first reservation is
// out leaves nothing once the answer is back: the hub gives back what the
// store granted and is forgotten. It stayed, holding the grant, until its
// next cleanup an hour later: nothing planned a hub without reporters when
// a store answer came (a bucket flood kept hubs six times the reporter
// cap alive).
func TestBucketWhoseStreamClosedMidReservationIsForgotten(t *testing.T) {
	tally := &tallyCounter{granted: map[string]uint64{}, released: map[string]uint64{}}
	gate := &gatedCounter{Counter: tally, entered: make(chan struct{}), open: make(chan struct{})}
	f := newFixtureWith(t, quota.DefaultOptions(), rules1000, false, func(c engine.Counter) engine.Counter {
		tally.Counter = c
		return gate
	})
	st := f.svc.Open(newSink())
	if err := st.Report(time.Now(), "q", users(0, 1, 0)); err != nil {
		t.Fatal(err)
	}
	<-gate.entered // the first call, the bucket's reservation
	st.Close()
	testenv.Eventually(t, "the closed stream's reporter gone while its reservation is out", func() bool {
		return f.st.Gauge("ratelimit.rlqs.reporters").Value() == 0
	})
	close(gate.open)
	testenv.Eventually(t, "the bucket forgotten once the reservation's answer is back", func() bool {
		return f.st.Gauge("ratelimit.rlqs.buckets").Value() == 0
	})
	testenv.Eventually(t, "what the store granted given back", func() bool {
		return len(tally.unreturned()) == 0
	})
	tally.mu.Lock()
	defer tally.mu.Unlock()
	if len(tally.granted) == 0 {
		t.Fatal("the store granted nothing: the test did not test a grant")
	}
}

// TestIdleBucketIsAbandoned: a bucket with no requests for IdleAfter is
// sent abandon_action once, and forgotten.
func TestIdleBucketIsAbandoned(t *testing.T) {
	f := newFixture(t, quota.DefaultOptions(), rules1000, true)
	k := newSink()
	st := f.svc.Open(k)
	start := f.clock.Now()
	if err := st.Report(start, "q", users(0, 1, 0)); err != nil {
		t.Fatal(err)
	}
	idleAfter := quota.DefaultOptions().IdleAfter
	for now := start.Add(5 * time.Second); now.Before(start.Add(idleAfter + 20*time.Second)); now = now.Add(5 * time.Second) {
		f.clock.Set(now)
		f.svc.Advance(now)
		if err := st.Report(now, "q", idle(0, 1, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		f.svc.Advance(now)
	}
	abandons := 0
	for _, a := range k.all() {
		if a.Abandon {
			abandons++
		}
	}
	if abandons != 1 {
		t.Errorf("%d abandon actions for a bucket idle past %v, want 1", abandons, idleAfter)
	}
}

// TestRunningServiceStopsEveryGoroutine: a service with its shards'
// goroutines answers, and Close leaves none behind (goleak), also with
// reports racing the close.
func TestRunningServiceStopsEveryGoroutine(t *testing.T) {
	o := quota.DefaultOptions()
	o.Shards = 4
	f := newFixture(t, o, rules1000, false)
	k := newSink()
	st := f.svc.Open(k)
	if err := st.Report(time.Now(), "q", users(0, 40, 0)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for len(k.all()) < 40 {
		select {
		case <-k.ch:
		case <-ctx.Done():
			t.Fatalf("%d of 40 buckets answered", len(k.all()))
		}
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := f.svc.Open(newSink())
			for j := range 50 {
				if err := s.Report(time.Now(), "q", users(1000*i+j, 1, 0)); err != nil {
					return // stopped: ErrClosed
				}
			}
			s.Close()
		}()
	}
	f.svc.Close()
	wg.Wait()
	if err := st.Report(time.Now(), "q", users(0, 1, time.Second)); err != quota.ErrClosed {
		t.Errorf("a report after Close: got %v, want ErrClosed", err)
	}
}

// pushSink keeps each Push apart.
type pushSink struct {
	mu     sync.Mutex
	pushes [][]quota.Action
}

func (k *pushSink) Push(a []quota.Action) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pushes = append(k.pushes, append([]quota.Action(nil), a...))
}

// TestYoungBucketAnsweredFirst: a report's bucket with less than
// MinElapsed of usage is one its Envoy has just made and runs on its
// no_assignment_behavior (ALLOW_ALL by default) until answered; it is
// answered in the first push of its report, wherever it stands in it,
// not after the buckets that came with it.
func TestYoungBucketAnsweredFirst(t *testing.T) {
	for _, tc := range []struct {
		name  string
		older int // buckets in the report before the young one
	}{
		{"alone", 0},
		{"behind one chunk", 64},
		{"behind a reconnected Envoy's 300 buckets", 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := quota.DefaultOptions()
			o.Shards = 1
			f := newFixture(t, o, rules1000, true)
			k := &pushSink{}
			st := f.svc.Open(k)
			// An Envoy whose stream was cut reports every bucket it has
			// on the new stream, each over its report period.
			u := users(0, tc.older, 5*time.Second)
			young := users(tc.older, 1, 0)[0]
			u = append(u, young)
			if err := st.Report(f.clock.Now(), "q", u); err != nil {
				t.Fatal(err)
			}
			k.mu.Lock()
			defer k.mu.Unlock()
			if len(k.pushes) == 0 {
				t.Fatal("no push after the report")
			}
			for i, p := range k.pushes {
				for _, a := range p {
					if a.Bucket == young.Bucket {
						if i != 0 {
							t.Errorf("the young bucket answered in push %d of %d, want the first", i+1, len(k.pushes))
						}
						return
					}
				}
			}
			t.Errorf("the young bucket never answered (%d pushes)", len(k.pushes))
		})
	}
}
