package rlqs_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors/rlqs"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/internal/testenv"
)

// gatedRules records the buckets in the order the shard looks their rule
// up (a new bucket's first report is served), and holds the first lookup
// until open is closed, so that a test can queue reports behind it.
type gatedRules struct {
	*engine.Service
	entered chan struct{}
	open    chan struct{}
	once    sync.Once

	mu    sync.Mutex
	order []string
}

func (g *gatedRules) QuotaRule(domain string, entries []engine.Entry) (engine.QuotaRule, bool, error) {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.entered)
		<-g.open
	}
	g.mu.Lock()
	for _, e := range entries {
		g.order = append(g.order, e.Value)
	}
	g.mu.Unlock()
	return g.Service.QuotaRule(domain, entries)
}

func (g *gatedRules) lookups() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.order)
}

// TestSmallStreamServedBeforeBacklog: a stream that reports one new
// bucket while another stream has a backlog of large reports waiting for
// the same shard is served next, before that backlog (issue 43: under a
// flood of new buckets the probe stream waited seconds behind every flood
// stream's reports, first come, first served). The shard is held in its
// first report's first lookup while the backlog and the small report are
// queued, so the order is the service's choice alone.
func TestSmallStreamServedBeforeBacklog(t *testing.T) {
	st := stats.NewStore()
	cfg, err := engine.LoadConfig([]engine.ConfigFile{{Name: "rules.yaml", YAML: []byte(rules1000)}}, engine.ConfigOptions{Stats: st})
	if err != nil {
		t.Fatal(err)
	}
	store := memory.NewWithOptions(memory.Options{})
	t.Cleanup(func() { _ = store.Close() })
	eo := engine.DefaultOptions()
	eo.Counter = engine.DirectCounter{Backend: store}
	eo.Stats = st
	eng, err := engine.NewService(eo)
	if err != nil {
		t.Fatal(err)
	}
	eng.SetConfig(cfg)
	rules := &gatedRules{Service: eng, entered: make(chan struct{}), open: make(chan struct{})}
	o := rlqs.DefaultOptions()
	o.Shards = 1
	svc, err := rlqs.New(o, rules, eo.Counter, nil, st)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()

	// The big stream reports chunk after chunk (one shard message each),
	// as a stream's owner does, from its own goroutine; posted tells each
	// report that was taken in.
	const chunk, chunks, backlog = 64, 12, 4
	bigSink, smallSink := newSink(), newSink()
	big, small := svc.Open(bigSink), svc.Open(smallSink)
	posted := make(chan error, chunks)
	go func() {
		for i := range chunks {
			err := big.Report(time.Now(), "q", users(i*chunk, chunk, 0))
			posted <- err
			if err != nil {
				return
			}
		}
	}()
	<-rules.entered // the shard holds the big stream's first report
	for range backlog {
		if err := <-posted; err != nil {
			t.Fatal(err)
		}
	}
	// One report of the first and backlog more wait for the shard; the
	// small stream reports one new bucket.
	if err := small.Report(time.Now(), "q", users(100_000, 1, 0)); err != nil {
		t.Fatal(err)
	}
	close(rules.open)
	for range chunks - backlog {
		if err := <-posted; err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, "every bucket looked up", func() bool { return len(rules.lookups()) == chunks*chunk+1 })
	order := rules.lookups()
	at := slices.Index(order, "u100000")
	if at != chunk {
		t.Errorf("the small stream's bucket was served after %d of the big stream's (want %d: only the report being served when it came)", at, chunk)
	}
	big.Close()
	small.Close()
}
