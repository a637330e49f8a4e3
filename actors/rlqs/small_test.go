package rlqs_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors/rlqs"
	"github.com/sluicehq/sluice/engine/memory"
	alloc "github.com/sluicehq/sluice/engine/rlqs"
)

// TestEnvoyTellsApart: a new assignment that Envoy would take for the one
// it has (only fill_interval's whole seconds differ) is written so that it
// is told apart, at the same rate; otherwise Envoy keeps the old rate
// while sluice counts the new one.
func TestEnvoyTellsApart(t *testing.T) {
	tb := func(max, per uint32, every time.Duration) alloc.Strategy {
		return alloc.Strategy{Kind: alloc.TokenBucket, MaxTokens: max, TokensPerFill: per, FillInterval: every}
	}
	for _, tc := range []struct{ cur, next alloc.Strategy }{
		{tb(1, 1, 2*time.Second), tb(1, 1, 3*time.Second)},
		{tb(1, 2, 4*time.Second), tb(1, 1, 3*time.Second)}, // doubling would look like cur: tripled
	} {
		if !rlqs.EnvoyEqual(tc.cur, tc.next) && tc.cur.TokensPerFill == tc.next.TokensPerFill {
			t.Fatalf("%v and %v should look equal to Envoy", tc.cur, tc.next)
		}
		d := rlqs.Distinct(tc.cur, tc.next)
		if rlqs.EnvoyEqual(tc.cur, d) || d.Rate() != tc.next.Rate() || d.MaxTokens != tc.next.MaxTokens {
			t.Errorf("distinct(%v, %v) = %v: want a bucket Envoy tells from the first at the second's rate", tc.cur, tc.next, d)
		}
	}
	if rlqs.EnvoyEqual(tb(2, 5, time.Second), tb(2, 6, time.Second)) {
		t.Error("different tokens_per_fill look equal")
	}
}

// TestSmallLimit: three Envoys on a limit of 10/s, each asking more than
// its share: every one gets a token bucket, and their rates and buckets
// together stay within the limit (whole tokens cost a small limit dear).
func TestSmallLimit(t *testing.T) {
	yaml := "domain: q\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 10}\n"
	clock := &benchClock{}
	t0 := time.Unix(1_800_000_000, 0)
	clock.set(t0)
	r := newReplicaWith(t, memory.New(clock.now), yaml, rlqs.DefaultOptions(), rlqs.NewManual)
	demand := []uint64{15, 8, 8}
	sinks, streams := make([]*sink, 3), make([]*rlqs.Stream, 3)
	for i := range sinks {
		sinks[i] = newSink()
		streams[i] = r.quota.Open(sinks[i])
		defer streams[i].Close()
	}
	for ms := 0; ms <= 6000; ms += 50 {
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		clock.set(now)
		for i, st := range streams {
			if ms == i*50 {
				if err := st.Report(now, "q", []rlqs.Usage{{Bucket: bucket("ann"), Allowed: 1}}); err != nil {
					t.Fatal(err)
				}
			} else if ms > i*50 && (ms-i*350)%1000 == 0 {
				if err := st.Report(now, "q", []rlqs.Usage{{Bucket: bucket("ann"), Elapsed: time.Second, Denied: demand[i]}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		r.quota.Tick(now)
	}
	total := 0.0
	for i, s := range sinks {
		all := s.all()
		last := all[len(all)-1].a.Strategy
		if last.Kind != alloc.TokenBucket || last.Rate() <= 0 {
			t.Errorf("Envoy %d ends with %v", i, last)
		}
		total += last.Rate() + float64(last.MaxTokens)
	}
	if total > 10 {
		t.Errorf("rates and buckets together %.1f, over the limit of 10", total)
	}
}
