package quota_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/alloc"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/quota"
)

// gatedCounter holds every store call of more than small operations
// until open is closed (telling entered at the first), as a store
// answering a flood's long calls late does.
type gatedCounter struct {
	engine.Counter
	small         int
	entered, open chan struct{}
	once          sync.Once
}

func (g *gatedCounter) Apply(ctx context.Context, ops []engine.CounterOp, b engine.Batch) error {
	if len(ops) > g.small {
		g.once.Do(func() { close(g.entered) })
		select {
		case <-g.open:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Counter.Apply(ctx, ops, b)
}

// TestSmallReportNotHeldBehindBackedUpStore: a stream reporting one new
// bucket is answered while the shard's store call for a flood's new
// buckets is out and more of the flood's operations wait for the next
// (issue 43: the probe stream waited for the store call out, then for its
// own among the flood's thousands of operations; with the store behind,
// the shard took no report at all). The flood's calls are held until the
// small stream is answered, so only a store call of the small report's
// own, beside the flood's, answers it.
//
// Before the express calls it fails: the small report waits in its lane
// while the shard is full, or its operations wait for the held call. So
// it does when only small reports are express: the stream's ack, queued
// before its report, is not taken while the shard is full.
func TestSmallReportNotHeldBehindBackedUpStore(t *testing.T) {
	st, store, eng := memoryEngine(t)
	rules := newGatedRules(eng, 0)
	// A new bucket's first plan reserves on a dozen windows or more: the
	// flood's 64 buckets a report make calls of hundreds; one bucket's
	// fewer than 64.
	gc := &gatedCounter{Counter: engine.DirectCounter{Backend: store}, small: 64, entered: make(chan struct{}), open: make(chan struct{})}
	var openOnce sync.Once
	release := func() { openOnce.Do(func() { close(gc.open) }) }
	o := quota.DefaultOptions()
	o.Shards = 1
	o.CallTimeout = time.Hour // the held calls must not time out
	svc, err := quota.New(o, rules, gc, nil, st)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	defer release()

	// The small stream has a bucket already, and its transport acks what
	// it was sent (before its next report, in the same lane).
	probe := newSink()
	ps := svc.Open(probe)
	defer ps.Close()
	if err := ps.Report(time.Now(), "q", users(100_000, 1, 0)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the small stream's first bucket assigned", func() bool { return assigned(probe, "u100000") })

	big := svc.Open(newSink())
	defer big.Close()
	if err := big.Report(time.Now(), "q", users(0, 64, 0)); err != nil {
		t.Fatal(err)
	}
	<-gc.entered
	// The flood's next report is planned while its first call is out: its
	// operations wait for the next call, and the shard is behind.
	if err := big.Report(time.Now(), "q", users(64, 64, 0)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the flood's second report looked up", func() bool { return len(rules.lookups()) == 129 })

	ps.Acked(time.Now(), time.Now())
	if err := ps.Report(time.Now(), "q", users(100_001, 1, 0)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the small stream's new bucket assigned while the flood's call is held", func() bool { return assigned(probe, "u100001") })
	release()
}

// assigned reports whether k was sent a token bucket for user.
func assigned(k *sink, user string) bool {
	for _, a := range k.all() {
		if a.Bucket.Map()["user"] == user && !a.Abandon && a.Strategy.Kind == alloc.TokenBucket {
			return true
		}
	}
	return false
}
