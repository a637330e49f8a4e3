package rlqs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors/rlqs"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
	alloc "github.com/sluicehq/sluice/engine/rlqs"
)

// TestExpiredIsNew: an assignment the hub did not renew in time has
// expired in the Envoy; sending the same strategy again gives the Envoy a
// new, full bucket, which must be paid for on the counters like any new
// one (it once went out as a renewal of nothing, uncounted).
func TestExpiredIsNew(t *testing.T) {
	clock := &benchClock{}
	t0 := time.Unix(1_800_000_000, 0)
	clock.set(t0)
	store := memory.New(clock.now)
	r := newReplicaWith(t, store, rules, rlqs.DefaultOptions(), rlqs.NewManual)
	snk := newSink()
	st := r.quota.Open(snk)
	defer st.Close()
	at := func(d time.Duration) time.Time { now := t0.Add(d); clock.set(now); return now }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(st.Report(at(0), "q", []rlqs.Usage{{Bucket: bucket("ann"), Allowed: 1}}))
	r.quota.Tick(at(50 * time.Millisecond))
	must(st.Report(at(time.Second), "q", []rlqs.Usage{{Bucket: bucket("ann"), Elapsed: time.Second, Allowed: 400}}))
	r.quota.Tick(at(time.Second + 50*time.Millisecond))
	// No tick for 10 s: every assignment has expired in the Envoy.
	must(st.Report(at(11*time.Second), "q", []rlqs.Usage{{Bucket: bucket("ann"), Elapsed: 10 * time.Second, Allowed: 0, Denied: 4000}}))
	now := at(11*time.Second + 50*time.Millisecond)
	r.quota.Tick(now)
	got := snk.all()
	last := got[len(got)-1].a
	if last.Strategy.Kind != alloc.TokenBucket {
		t.Fatalf("last action %+v, want a token bucket", last)
	}
	read := []engine.CounterOp{{Key: fmt.Sprintf("q_user_ann_%d", now.Unix()), Kind: engine.OpGet}}
	must(store.Exec(context.Background(), read))
	// The Envoy may spend the bucket's tokens and its rate over the rest of
	// the window: the counter must hold at least that.
	spend := float64(last.Strategy.MaxTokens) + last.Strategy.Rate()*0.95
	if float64(read[0].After) < spend {
		t.Fatalf("sent %+v, the window's counter holds %d, under the %.0f it may spend", last.Strategy, read[0].After, spend)
	}
}
