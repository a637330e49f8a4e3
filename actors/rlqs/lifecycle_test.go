package rlqs_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors/rlqs"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
	alloc "github.com/sluicehq/sluice/engine/rlqs"
)

func isAbandon(a rlqs.Action) bool { return a.Abandon }

func isBucket(a rlqs.Action) bool { return !a.Abandon && a.Strategy.Kind == alloc.TokenBucket }

// TestReloadAbandons: a bucket whose rule a reload removed is abandoned by
// its Envoy; one whose rule changed is assigned under the new limit.
func TestReloadAbandons(t *testing.T) {
	r := newReplica(t, memory.New(nil), rules, rlqs.DefaultOptions())
	snk := newSink()
	st := r.quota.Open(snk)
	defer st.Close()
	if err := st.Report(time.Now(), "q", []rlqs.Usage{{Bucket: bucket("ann")}, {Bucket: map[string]string{"plan": "gold"}}}); err != nil {
		t.Fatal(err)
	}
	snk.wait(t, "ann", isBucket)
	next := `domain: q
descriptors:
  - key: plan
    rate_limit: {unit: second, requests_per_unit: 10}
`
	cfg, err := engine.LoadConfig([]engine.ConfigFile{{Name: "rules.yaml", YAML: []byte(next)}}, engine.ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.eng.SetConfig(cfg)
	snk.wait(t, "ann", isAbandon)
	gold := waitFor(t, snk, func(a rlqs.Action) bool { return a.Bucket["plan"] == "gold" && isBucket(a) })
	if rate := gold.Strategy.Rate() + float64(gold.Strategy.MaxTokens); rate > 10 {
		t.Errorf("plan=gold under a limit of 10/s: %+v", gold.Strategy)
	}
	if n := r.stats.CounterValue("ratelimit.rlqs.abandons"); n != 1 {
		t.Errorf("abandons = %d, want 1", n)
	}
}

// TestIdleAbandons: a reporter whose bucket sees no request for IdleAfter
// is sent abandon_action.
func TestIdleAbandons(t *testing.T) {
	o := rlqs.DefaultOptions()
	o.Alloc.MinTTL, o.IdleAfter = time.Second, time.Second
	r := newReplica(t, memory.New(nil), rules, o)
	snk := newSink()
	st := r.quota.Open(snk)
	defer st.Close()
	report(t, st, []string{"ann"}, 0, 0, 0)
	snk.wait(t, "ann", isBucket)
	snk.wait(t, "ann", isAbandon)
}

// TestMaxBuckets: a stream reporting more buckets than it may track gets
// abandon_action for the rest, counted.
func TestMaxBuckets(t *testing.T) {
	o := rlqs.DefaultOptions()
	o.MaxBuckets = 2
	r := newReplica(t, memory.New(nil), rules, o)
	snk := newSink()
	st := r.quota.Open(snk)
	defer st.Close()
	report(t, st, []string{"a", "b", "c"}, 0, 1, 0)
	snk.wait(t, "c", isAbandon)
	snk.wait(t, "a", isBucket)
	snk.wait(t, "b", isBucket)
	if n := r.stats.CounterValue("ratelimit.rlqs.refused_buckets"); n != 1 {
		t.Errorf("refused_buckets = %d, want 1", n)
	}
}

// TestStoreDown: with the store failing (full), nobody is sent more than was
// paid for: no assignment goes out, and the failures are counted.
func TestStoreDown(t *testing.T) {
	// A store with no room for a counter fails every reservation.
	store := memory.NewWithOptions(memory.Options{Budget: memory.NewBudget(1)})
	r := newReplica(t, store, rules, rlqs.DefaultOptions())
	snk := newSink()
	st := r.quota.Open(snk)
	defer st.Close()
	report(t, st, []string{"ann"}, 0, 1, 0)
	deadline := time.Now().Add(5 * time.Second)
	for r.stats.CounterValue("ratelimit.rlqs.reserve_errors") < 3 {
		if time.Now().After(deadline) {
			t.Fatal("no store failure counted within 5s")
		}
		select {
		case <-snk.more:
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, x := range snk.all() {
		if isBucket(x.a) {
			t.Fatalf("assigned %+v with the store down", x.a)
		}
	}
}

// TestGhostCounted: when a stream ends, its Envoy may still spend what it
// was sent until the TTL ends: a new stream on the same bucket gets only
// what is left, and the whole limit once the ghost has expired.
func TestGhostCounted(t *testing.T) {
	o := rlqs.DefaultOptions()
	o.Alloc.FirstShare = 1
	r := newReplica(t, memory.New(nil), rules, o)
	first := newSink()
	a := r.quota.Open(first)
	report(t, a, []string{"ann"}, 0, 1, 0)
	got := first.wait(t, "ann", isBucket)
	a.Close()
	ghostEnds := time.Now().Add(got.TTL)
	second := newSink()
	b := r.quota.Open(second)
	defer b.Close()
	report(t, b, []string{"ann"}, 0, 1, 0)
	x := second.wait(t, "ann", any)
	if x.Strategy.Kind == alloc.TokenBucket && float64(x.Strategy.TokensPerFill)+float64(got.Strategy.TokensPerFill) > 1000 {
		t.Fatalf("ghost %+v and the new stream %+v together pass 1000/s", got.Strategy, x.Strategy)
	}
	late := waitFor(t, second, func(a rlqs.Action) bool {
		return isBucket(a) && time.Now().After(ghostEnds) && a.Strategy.TokensPerFill > 900
	})
	t.Logf("ghost %v, then %v, then %v", got.Strategy, x.Strategy, late.Strategy)
}

// TestTokenBucketRuleCounted: under a token-bucket rule, what the Envoys
// report admitted is taken from the rule's shared bucket, so RLS
// decisions see it.
func TestTokenBucketRuleCounted(t *testing.T) {
	yaml := `domain: q
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: token_bucket}
`
	r := newReplica(t, memory.New(nil), yaml, rlqs.DefaultOptions())
	snk := newSink()
	st := r.quota.Open(snk)
	defer st.Close()
	report(t, st, []string{"ann"}, 0, 1, 0)
	snk.wait(t, "ann", isBucket)
	report(t, st, []string{"ann"}, time.Second, 98, 0)
	req := &engine.Request{Domain: "q", Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: "user", Value: "ann"}}}}}
	deadline := time.Now().Add(5 * time.Second)
	for {
		// 99 reported admitted: one token left for RLS callers, at most.
		oks := 0
		for range 3 {
			resp, err := r.eng.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Statuses[0].Code == engine.CodeOK {
				oks++
			}
		}
		if oks <= 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("RLS decisions got %d OKs after the Envoy reported 99 of 100 tokens used", oks)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitFor is sink.wait on any bucket.
func waitFor(t *testing.T, s *sink, ok func(rlqs.Action) bool) rlqs.Action {
	t.Helper()
	deadline := time.After(8 * time.Second)
	seen := 0
	for {
		all := s.all()
		for _, x := range all[seen:] {
			if ok(x.a) {
				return x.a
			}
		}
		seen = len(all)
		select {
		case <-s.more:
		case <-deadline:
			var b strings.Builder
			for _, x := range all {
				b.WriteString(x.a.Key + " ")
			}
			t.Fatalf("no matching action within 8s; got %d: %s", len(all), b.String())
		}
	}
}
