package quota_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/testenv/memengine"
	"github.com/sluicehq/sluice/quota"
)

// gatedRules records the buckets in the order the shard looks their rule
// up (a new bucket's first report is served), and holds the nth lookup
// until open[n] is closed (telling entered[n]), so that a test can queue
// reports meanwhile.
type gatedRules struct {
	*engine.Service
	entered, open []chan struct{}

	mu    sync.Mutex
	order []string
}

// memoryEngine is an engine with the 1,000/s rule (rules1000) counting
// directly on a memory store, and the statistics store it reports to.
func memoryEngine(t *testing.T) (*stats.Store, *memory.Backend, *engine.Service) {
	t.Helper()
	e := memengine.New(t, rules1000, memory.Options{})
	return e.Stats, e.Store, e.Service
}

func newGatedRules(eng *engine.Service, gates int) *gatedRules {
	g := &gatedRules{Service: eng}
	for range gates {
		g.entered = append(g.entered, make(chan struct{}))
		g.open = append(g.open, make(chan struct{}))
	}
	return g
}

func (g *gatedRules) QuotaRule(domain string, entries []engine.Entry) (engine.QuotaRule, bool, error) {
	g.mu.Lock()
	n := len(g.order)
	for _, e := range entries {
		g.order = append(g.order, e.Value)
	}
	g.mu.Unlock()
	if n < len(g.open) {
		close(g.entered[n])
		<-g.open[n]
	}
	return g.Service.QuotaRule(domain, entries)
}

func (g *gatedRules) lookups() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.order)
}

// TestFloodSmallStreamServedBeforeBacklog: a stream that reports one new
// bucket while other streams have backlogs of large reports waiting for
// the same shard is served next, before those backlogs (issue 43: under a
// flood of new buckets the probe stream waited seconds behind every flood
// stream's reports, first come, first served). The shard is held in its
// first report's first lookup while the backlog and the small report are
// queued, so the order is the service's choice alone.
//
// The inbox before (one channel) fails it: first come, first served. So
// do fair-queuing tags, by finish (self-clocked) or by start: the big
// streams' first reports tie, and the small one waited for each.
func TestFloodSmallStreamServedBeforeBacklog(t *testing.T) {
	st, store, eng := memoryEngine(t)
	rules := newGatedRules(eng, 2)
	o := quota.DefaultOptions()
	o.Shards = 1
	svc, err := quota.New(o, rules, engine.DirectCounter{Backend: store}, nil, st)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()

	// A stream's one new bucket holds the shard (the first lookup) while
	// big streams queue reports of a chunk each, as many as a stream may
	// have waiting, all starting together. Then the shard takes one of
	// them (held again, in the second lookup), and a small stream reports
	// one new bucket twice: neither report may wait for the others' first
	// reports (their tie: its first report moved its second's fair-queuing
	// tag past it), let alone their backlogs.
	const chunk, chunks, backlog, bigs = 64, 8, 4, 3
	first := svc.Open(newSink())
	if err := first.Report(time.Now(), "q", users(200_000, 1, 0)); err != nil {
		t.Fatal(err)
	}
	<-rules.entered[0]
	streams := []*quota.Stream{first}
	posted := make([]chan error, bigs)
	more := make(chan struct{})
	for b := range bigs {
		big := svc.Open(newSink())
		streams = append(streams, big)
		posted[b] = make(chan error, chunks)
		go func() {
			for i := range chunks {
				if i == backlog {
					<-more
				}
				err := big.Report(time.Now(), "q", users((b*chunks+i)*chunk, chunk, 0))
				posted[b] <- err
				if err != nil {
					return
				}
			}
		}()
	}
	for b := range bigs {
		for range backlog {
			if err := <-posted[b]; err != nil {
				t.Fatal(err)
			}
		}
	}
	close(rules.open[0])
	<-rules.entered[1]
	small := svc.Open(newSink())
	streams = append(streams, small)
	for i := range 2 {
		if err := small.Report(time.Now(), "q", users(100_000+i, 1, 0)); err != nil {
			t.Fatal(err)
		}
	}
	close(rules.open[1])
	close(more)
	for b := range bigs {
		for range chunks - backlog {
			if err := <-posted[b]; err != nil {
				t.Fatal(err)
			}
		}
	}
	testenv.Eventually(t, "every bucket looked up", func() bool { return len(rules.lookups()) == bigs*chunks*chunk+3 })
	order := rules.lookups()
	for i, want := range []int{1 + chunk, 2 + chunk} {
		if at := slices.Index(order, fmt.Sprint("u", 100_000+i)); at != want {
			t.Errorf("the small stream's report %d was looked up %d-th (want %d-th: after the first stream's, the report being served when it came and its own)", i, at, want)
		}
	}
	for _, st := range streams {
		st.Close()
	}
}

// TestServedStreamBeforeNewStreams: a stream already served (the probe
// Envoy, one bucket now and then) reports while a burst of new streams,
// each with one new bucket, waits for the same shard: its report is served
// next, before theirs (issue 43: ten thousand streams opened at once were
// each charged less than the probe, whose charge from a few earlier
// reports had not faded on an idle shard, and it waited half a second for
// all of them). Without the new stream's charge it is served last. Also
// when the probe's bucket is its first on that shard: charged as a new
// stream there, it was served after the burst (344 ms in the 10,000-stream
// flood).
func TestServedStreamBeforeNewStreams(t *testing.T) {
	for _, tc := range []struct {
		name string
		// shards; the probe's earlier buckets are on shard 0 and the
		// burst's and the probe's next on the last.
		shards int
	}{
		{"same shard", 1},
		{"first bucket on another shard", 2},
	} {
		t.Run(tc.name, func(t *testing.T) { servedBeforeNew(t, tc.shards) })
	}
}

func servedBeforeNew(t *testing.T, shards int) {
	st, store, eng := memoryEngine(t)
	const earlier, burst = 4, 50
	rules := newGatedRules(eng, earlier+1)
	for i := range earlier {
		close(rules.open[i]) // the probe's earlier reports pass
	}
	o := quota.DefaultOptions()
	o.Shards = shards
	// The probe reported a while before the burst: its lane's charges
	// faded with the time passed (ten seconds, on this clock).
	var mu sync.Mutex
	now := time.Now()
	o.Clock = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	svc, err := quota.New(o, rules, engine.DirectCounter{Backend: store}, nil, st)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	// on is the next user (counting up) whose bucket is on shard.
	next := 0
	on := func(shard int) int {
		for ; ; next++ {
			if svc.ShardOf("q", users(next, 1, 0)[0].Bucket) == shard {
				next++
				return next - 1
			}
		}
	}
	last := shards - 1

	probe := svc.Open(newSink())
	streams := []*quota.Stream{probe}
	for i := range earlier {
		if err := probe.Report(time.Now(), "q", users(on(0), 1, 0)); err != nil {
			t.Fatal(err)
		}
		<-rules.entered[i]
	}
	mu.Lock()
	now = now.Add(10 * time.Second)
	mu.Unlock()
	// Another stream's new bucket holds the shard while the burst and the
	// probe's next report queue.
	holder := svc.Open(newSink())
	streams = append(streams, holder)
	if err := holder.Report(time.Now(), "q", users(on(last), 1, 0)); err != nil {
		t.Fatal(err)
	}
	<-rules.entered[earlier]
	for range burst {
		s := svc.Open(newSink())
		streams = append(streams, s)
		if err := s.Report(time.Now(), "q", users(on(last), 1, 0)); err != nil {
			t.Fatal(err)
		}
	}
	probed := on(last)
	if err := probe.Report(time.Now(), "q", users(probed, 1, 0)); err != nil {
		t.Fatal(err)
	}
	close(rules.open[earlier])
	testenv.Eventually(t, "every bucket looked up", func() bool { return len(rules.lookups()) == earlier+1+burst+1 })
	order := rules.lookups()
	if at, want := slices.Index(order, fmt.Sprint("u", probed)), earlier+1; at != want {
		t.Errorf("the probe's report was looked up %d-th, want %d-th: right after the report being served when it came, before the %d new streams'", at, want, burst)
	}
	for _, s := range streams {
		s.Close()
	}
}
