package rlqs_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors/rlqs"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
	alloc "github.com/sluicehq/sluice/engine/rlqs"
)

// envoy plays the rate_limit_quota filter for one bucket with a steady
// demand: it enforces what its stream is sent (a token bucket refilled
// continuously, starting full, kept while the same one is sent again),
// denies once an assignment expires (no_assignment_behavior deny_all),
// and reports every interval. It keeps enforcing across a new stream.
type envoy struct {
	demand float64 // requests per second
	every  time.Duration

	mu       sync.Mutex
	stream   *rlqs.Stream
	sink     *sink
	seen     int
	cur      rlqs.Action
	has      bool
	until    time.Time
	tokens   float64
	backlog  float64
	allowed  uint64
	denied   uint64
	lastRep  time.Time
	windows  map[int64]uint64
	admitted uint64
}

func newEnvoy(demand float64, every time.Duration) *envoy {
	return &envoy{demand: demand, every: every, windows: make(map[int64]uint64)}
}

// connect opens a stream on q and subscribes at once.
func (e *envoy) connect(t *testing.T, q *rlqs.Service) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stream != nil {
		e.stream.Close()
	}
	e.sink, e.seen = newSink(), 0
	e.stream = q.Open(e.sink)
	e.lastRep = time.Now()
	if err := e.stream.Report(time.Now(), "q", []rlqs.Usage{{Bucket: bucket("ann"), Allowed: 1}}); err != nil {
		t.Error(err)
	}
}

// step advances the Envoy to now.
func (e *envoy) step(t *testing.T, now time.Time, dt time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	all := e.sink.all()
	for _, x := range all[e.seen:] {
		e.apply(x.a, now)
	}
	e.seen = len(all)
	if e.has && !now.Before(e.until) {
		e.has = false
	}
	e.backlog += e.demand * dt.Seconds()
	n := math.Floor(e.backlog)
	e.backlog -= n
	ok := 0.0
	if e.has {
		switch e.cur.Strategy.Kind {
		case alloc.AllowAll:
			ok = n
		case alloc.TokenBucket:
			e.tokens = min(e.tokens+e.cur.Strategy.Rate()*dt.Seconds(), float64(e.cur.Strategy.MaxTokens))
			ok = min(n, math.Floor(e.tokens))
			e.tokens -= ok
		}
	}
	e.allowed += uint64(ok)
	e.denied += uint64(n - ok)
	e.windows[now.Unix()] += uint64(ok)
	e.admitted += uint64(ok)
	if now.Sub(e.lastRep) >= e.every {
		el := now.Sub(e.lastRep).Truncate(time.Second)
		err := e.stream.Report(now, "q", []rlqs.Usage{{Bucket: bucket("ann"), Elapsed: el, Allowed: e.allowed, Denied: e.denied}})
		if err != nil && err != rlqs.ErrClosed {
			t.Error(err)
		}
		e.allowed, e.denied, e.lastRep = 0, 0, now
	}
}

func (e *envoy) apply(a rlqs.Action, now time.Time) {
	if a.Abandon {
		e.has = false
		return
	}
	if !e.has || a.Strategy != e.cur.Strategy {
		e.tokens = float64(a.Strategy.MaxTokens)
	}
	e.cur, e.has, e.until = a, true, now.Add(a.TTL.Truncate(time.Second))
}

// TestFleetNeverOver: five Envoys on two replicas, each wanting 600/s of a
// 1000/s bucket, and an RLS caller on the same rule: in every second the
// Envoys' admissions and the RLS caller's OKs together stay within 1000,
// while the Envoys reconnect (a stream cut, a replica stopped); and once
// the stopped replica's reservations have expired, the Envoys on the other
// use the limit again.
func TestFleetNeverOver(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 10 s of traffic")
	}
	store := memory.New(nil)
	o := rlqs.DefaultOptions()
	o.Alloc.MinTTL = time.Second
	r1 := newReplica(t, store, rules, o)
	r2 := newReplica(t, store, rules, o)
	const every = 400 * time.Millisecond
	envoys := make([]*envoy, 5)
	for i := range envoys {
		envoys[i] = newEnvoy(600, every)
		envoys[i].connect(t, []*rlqs.Service{r1.quota, r2.quota}[i%2])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 11*time.Second)
	defer cancel()
	rls := map[int64]uint64{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // an RLS caller through replica 2, 300/s
		defer wg.Done()
		req := &engine.Request{Domain: "q", Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: "user", Value: "ann"}}}}}
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for ctx.Err() == nil {
			<-tk.C
			for i := 0; i < 3; i++ {
				now := time.Now()
				resp, err := r2.eng.ShouldRateLimit(ctx, req)
				if err == nil && resp.Statuses[0].Code == engine.CodeOK {
					rls[now.Unix()]++
				}
			}
		}
	}()
	start := time.Now()
	tk := time.NewTicker(5 * time.Millisecond)
	defer tk.Stop()
	last := start
	cut, stopped := false, false
	counterSeen := map[int64]uint64{}
	for now := range tk.C {
		if now.Sub(start) > 10500*time.Millisecond {
			break
		}
		for _, e := range envoys {
			e.step(t, now, now.Sub(last))
		}
		last = now
		rd := []engine.CounterOp{{Key: fmt.Sprintf("q_user_ann_%d", now.Unix()), Kind: engine.OpGet}}
		if err := store.Exec(ctx, rd); err == nil {
			counterSeen[now.Unix()] = rd[0].After
		}
		if !cut && now.Sub(start) > 2*time.Second {
			cut = true
			envoys[0].connect(t, r2.quota) // its stream to replica 1 is cut
		}
		if !stopped && now.Sub(start) > 3500*time.Millisecond {
			stopped = true
			r1.quota.Close() // SIGTERM: its Envoys reconnect to replica 2
			for i := 2; i < 5; i += 2 {
				envoys[i].connect(t, r2.quota)
			}
		}
	}
	cancel()
	wg.Wait()
	for _, e := range envoys {
		e.stream.Close()
	}
	var total []uint64
	for s := start.Unix() + 1; s < last.Unix(); s++ {
		n := rls[s]
		for _, e := range envoys {
			n += e.windows[s]
		}
		total = append(total, n)
		if n > 1000 {
			t.Errorf("second %d: %d admitted (RLS %d) under a limit of 1000", s-start.Unix(), n, rls[s])
		}
	}
	t.Logf("admitted per second: %v", total)
	for s := start.Unix(); s <= last.Unix(); s++ {
		line := []uint64{counterSeen[s], rls[s]}
		for _, e := range envoys {
			line = append(line, e.windows[s])
		}
		t.Logf("second %d: counter, RLS OK, per Envoy %v", s-start.Unix(), line)
	}
	// Replica 1's Envoys moved at 3.5 s; what it had reserved for them
	// stays counted until their assignments' TTL (2 s) ends, and a new
	// assignment on replica 2 must be paid for in every window its TTL
	// reaches: the Envoys have the whole limit again about 3 s later.
	if n := len(total); n < 9 || total[n-1] < 900 || total[n-2] < 900 {
		t.Errorf("the fleet did not use the limit once on one replica again: %v", total)
	}
}
