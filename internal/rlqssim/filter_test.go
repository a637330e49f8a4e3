package rlqssim

import (
	"math"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

var t0 = time.Unix(1_800_000_000, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

const ms = time.Millisecond

func tb(max, perFill uint32, fill time.Duration) Strategy {
	return Strategy{Kind: TokenBucket, MaxTokens: max, TokensPerFill: perFill, FillInterval: fill}
}

// admits counts how many of n requests, spread evenly over [from, to), a
// limiter lets through.
func admits(l *limiter, n int, from, to time.Duration) int {
	got := 0
	for i := range n {
		if l.allow(at(from + (to-from)*time.Duration(i)/time.Duration(n))) {
			got++
		}
	}
	return got
}

func TestLimiter(t *testing.T) {
	for _, c := range []struct {
		name string
		s    Strategy
		n    int // requests over one second
		want int
	}{
		{"allow all", Strategy{Kind: AllowAll}, 100, 100},
		{"deny all", Strategy{Kind: DenyAll}, 100, 0},
		// Full at 10, then 50/s: 10 + 50 in the second, minus the refill
		// not yet due at the last request (49.5 → 49).
		{"burst then rate", tb(10, 50, time.Second), 1000, 59},
		{"two per two seconds", tb(1, 2, 2*time.Second), 1000, 1 + 0},
		{"under the rate", tb(10, 50, time.Second), 20, 20},
		{"zero fill interval is unbounded", tb(1, 1, 0), 1000, 1000},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := admits(newLimiter(c.s, t0), c.n, 0, time.Second); got != c.want {
				t.Errorf("admitted %d, want %d", got, c.want)
			}
		})
	}
}

func strategyProto(s Strategy, fillNanos int32) *typev3.RateLimitStrategy {
	switch s.Kind {
	case DenyAll:
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	case TokenBucket:
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
			MaxTokens: s.MaxTokens, TokensPerFill: wrapperspb.UInt32(s.TokensPerFill),
			FillInterval: &durationpb.Duration{Seconds: int64(s.FillInterval / time.Second), Nanos: fillNanos}}}}
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_ALLOW_ALL}}
}

func TestFromProto(t *testing.T) {
	r, err := fromProto(strategyProto(tb(5, 3, 2*time.Second), 500_000_000))
	if err != nil || r.Strategy != tb(5, 3, 2*time.Second) || r.fillNanos != 5e8 {
		t.Errorf("token bucket 2.5 s read as %+v, %v; want fill 2 s, nanos kept", r, err)
	}
	if r.Rate() != 1.5 {
		t.Errorf("rate %v, want 1.5/s", r.Rate())
	}
	unset := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: 4, FillInterval: durationpb.New(time.Second)}}}
	if r, _ := fromProto(unset); r.TokensPerFill != 1 {
		t.Errorf("unset tokens_per_fill read as %d, want 1", r.TokensPerFill)
	}
	for name, p := range map[string]*typev3.RateLimitStrategy{
		"requests_per_time_unit": {Strategy: &typev3.RateLimitStrategy_RequestsPerTimeUnit_{RequestsPerTimeUnit: &typev3.RateLimitStrategy_RequestsPerTimeUnit{RequestsPerTimeUnit: 5}}},
		"unset":                  {},
		"max_tokens 0":           strategyProto(tb(0, 1, time.Second), 0),
	} {
		if _, err := fromProto(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// fixture is one Envoy's filter over buckets "a" (0) and "b" (1).
func fixture(bh behaviours) *filter {
	fb := &fleetBuckets{domain: "d", index: map[string]int{}, bh: bh}
	for i, v := range []string{"a", "b"} {
		fb.ids = append(fb.ids, &rlqsv3.BucketId{Bucket: map[string]string{"k": v}})
		fb.index[bucketKey(fb.ids[i].Bucket)] = i
	}
	return newFilter(fb)
}

func assignment(bucket string, s Strategy, fillNanos int32, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse {
	return &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{
		BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"k": bucket}},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(ttl), RateLimitStrategy: strategyProto(s, fillNanos)}}}}}
}

func abandon(bucket string) *rlqsv3.RateLimitQuotaResponse {
	return &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{
		BucketId:     &rlqsv3.BucketId{Bucket: map[string]string{"k": bucket}},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}}}}
}

// burst sends n requests into bucket i at instant d and counts the
// allowed ones.
func burst(f *filter, i, n int, d time.Duration) int {
	got := 0
	for range n {
		if ok, _ := f.request(i, at(d)); ok {
			got++
		}
	}
	return got
}

func TestAssignmentReplacement(t *testing.T) {
	for _, c := range []struct {
		name      string
		second    Strategy
		nanos     int32
		wantAfter int // admitted of 100 right after the second assignment
	}{
		// Equal: the bucket, emptied by the first burst, stays empty.
		{"equal keeps the tokens", tb(10, 10, time.Second), 0, 0},
		// Envoy compares only the nanos of fill_interval: kept too.
		{"differs in fill seconds only: kept", tb(10, 10, 3*time.Second), 0, 0},
		{"other max_tokens replaces, full", tb(20, 10, time.Second), 0, 20},
		{"other tokens_per_fill replaces, full", tb(10, 5, time.Second), 0, 10},
		{"other fill nanos replaces, full", tb(10, 10, time.Second), 1, 10},
		{"blanket rule replaces", Strategy{Kind: AllowAll}, 0, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := fixture(behaviours{})
			burst(f, 0, 1, 0) // subscribes
			f.apply(assignment("a", tb(10, 10, time.Second), 0, 10*time.Second), at(0))
			if got := burst(f, 0, 100, 0); got != 10 {
				t.Fatalf("first assignment admitted %d of 100, want its 10 tokens", got)
			}
			f.apply(assignment("a", c.second, c.nanos, 10*time.Second), at(0))
			if got := burst(f, 0, 100, 0); got != c.wantAfter {
				t.Errorf("admitted %d of 100 after the second assignment, want %d", got, c.wantAfter)
			}
		})
	}
}

func TestExpiryChain(t *testing.T) {
	deny := Strategy{Kind: DenyAll}
	quota := tb(5, 5, time.Second)
	for _, c := range []struct {
		name string
		bh   behaviours
		// state and admitted of 100 at each instant (the TTL is 2 s)
		checks []struct {
			d     time.Duration
			state State
			want  int
		}
	}{
		{"no expired behaviour: straight to no-assignment", behaviours{}, []struct {
			d     time.Duration
			state State
			want  int
		}{{time.Second, Active, 5}, {2 * time.Second, NoAssignment, 100}}},
		{"fallback for its timeout, then no-assignment (deny)", behaviours{noAssignment: deny,
			expired: &ExpiredBehavior{Fallback: &Strategy{Kind: AllowAll}, Timeout: 3 * time.Second}}, []struct {
			d     time.Duration
			state State
			want  int
		}{{1999 * ms, Active, 5}, {2 * time.Second, Expired, 100}, {4999 * ms, Expired, 100}, {5 * time.Second, NoAssignment, 0}}},
		{"reuse last assignment keeps its bucket", behaviours{noAssignment: deny,
			expired: &ExpiredBehavior{Timeout: 3 * time.Second}}, []struct {
			d     time.Duration
			state State
			want  int
		}{{time.Second, Active, 5}, {3 * time.Second, Expired, 5}, {5 * time.Second, NoAssignment, 0}}},
		{"zero timeout: straight to no-assignment", behaviours{expired: &ExpiredBehavior{Fallback: &deny}}, []struct {
			d     time.Duration
			state State
			want  int
		}{{2 * time.Second, NoAssignment, 100}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := fixture(c.bh)
			f.request(0, at(0))
			f.apply(assignment("a", quota, 0, 2*time.Second), at(0))
			burst(f, 0, 100, 0) // empties the bucket
			for _, ch := range c.checks {
				if v := f.view(0, at(ch.d)); v.State != ch.state {
					t.Errorf("at %v: state %v, want %v", ch.d, v.State, ch.state)
				}
				if got := burst(f, 0, 100, ch.d); got != ch.want {
					t.Errorf("at %v: admitted %d of 100, want %d", ch.d, got, ch.want)
				}
			}
		})
	}
}

func TestZeroTTLExpiresAtOnce(t *testing.T) {
	f := fixture(behaviours{noAssignment: Strategy{Kind: DenyAll}})
	f.request(0, at(0))
	f.apply(assignment("a", Strategy{Kind: AllowAll}, 0, 0), at(0))
	if v := f.view(0, at(0)); v.State != NoAssignment {
		t.Errorf("a TTL of 0 left the bucket %v, want no-assignment", v.State)
	}
	f.apply(assignment("a", Strategy{Kind: AllowAll}, 0, 1900*ms), at(0))
	if v := f.view(0, at(time.Second)); v.State != NoAssignment {
		t.Errorf("a TTL of 1.9 s is read as 1 s; at 1 s the bucket is %v", v.State)
	}
}

func TestSubscriptionReportsAndAbandon(t *testing.T) {
	f := fixture(behaviours{})
	if f.report(at(0)) != nil {
		t.Error("a filter with no bucket reported")
	}
	ok, sub := f.request(1, at(300*ms))
	if !ok || sub == nil || len(sub.BucketQuotaUsages) != 1 {
		t.Fatalf("first request: allowed %v, subscription %v", ok, sub)
	}
	u := sub.BucketQuotaUsages[0]
	if u.BucketId.Bucket["k"] != "b" || u.NumRequestsAllowed != 1 || u.TimeElapsed.AsDuration() != 0 || sub.Domain != "d" {
		t.Errorf("subscription report %v, want bucket b, one allowed, 0 s elapsed, domain d", sub)
	}
	if _, again := f.request(1, at(400*ms)); again != nil {
		t.Error("a second request into a tracked bucket subscribed again")
	}
	burst(f, 1, 4, 500*ms)
	f.request(0, at(time.Second))
	// b was last reported at 0.3 s: 2.2 s later, truncated to 2 s; a at 1 s.
	rep := f.report(at(2500 * ms))
	if len(rep.BucketQuotaUsages) != 2 {
		t.Fatalf("periodic report %v, want both buckets", rep)
	}
	for _, u := range rep.BucketQuotaUsages {
		want := map[string]struct {
			n       uint64
			elapsed time.Duration
		}{"a": {0, time.Second}, "b": {5, 2 * time.Second}}[u.BucketId.Bucket["k"]]
		if u.NumRequestsAllowed != want.n || u.TimeElapsed.AsDuration() != want.elapsed {
			t.Errorf("bucket %v: %d allowed over %v, want %d over %v", u.BucketId.Bucket, u.NumRequestsAllowed, u.TimeElapsed.AsDuration(), want.n, want.elapsed)
		}
	}
	if rep := f.report(at(2900 * ms)); rep.BucketQuotaUsages[0].NumRequestsAllowed != 0 || rep.BucketQuotaUsages[0].TimeElapsed.AsDuration() != 0 {
		t.Errorf("counters not reset, or 0.4 s not truncated to 0: %v", rep)
	}

	rs := f.apply(abandon("b"), at(3*time.Second))
	if len(rs) != 1 || !rs[0].Abandon || rs[0].Ignored != "" || f.view(1, at(3*time.Second)).Tracked {
		t.Fatalf("abandon: %+v; bucket still tracked: %v", rs, f.view(1, at(3*time.Second)).Tracked)
	}
	if rep := f.report(at(4 * time.Second)); len(rep.BucketQuotaUsages) != 1 || rep.BucketQuotaUsages[0].BucketId.Bucket["k"] != "a" {
		t.Errorf("an abandoned bucket is still reported: %v", rep)
	}
	if _, sub := f.request(1, at(4*time.Second)); sub == nil {
		t.Error("the next request into an abandoned bucket did not subscribe again")
	}
	for _, r := range append(f.apply(abandon("zzz"), at(5*time.Second)), f.apply(assignment("zzz", tb(1, 1, time.Second), 0, time.Second), at(5*time.Second))...) {
		if r.Ignored == "" || r.Bucket != -1 {
			t.Errorf("an action for an unknown bucket was applied: %+v", r)
		}
	}
	f.reset()
	if f.report(at(6*time.Second)) != nil {
		t.Error("a reset filter still reports buckets")
	}
}

func TestAccumulator(t *testing.T) {
	for _, c := range []struct {
		rate  float64
		ticks int
		dt    time.Duration
		want  int
	}{
		{42.857, 1000, 10 * ms, 428}, // 428.57 over 10 s
		{0.5, 399, 10 * ms, 1},       // 1.995
		{3000, 100, 10 * ms, 3000},
		{100, 10, 0, 0},
		{-5, 10, 10 * ms, 0},
	} {
		var a accumulator
		got := 0
		for range c.ticks {
			got += a.add(c.rate, c.dt)
		}
		if got != c.want {
			t.Errorf("%v/s over %d ticks of %v: %d requests, want %d", c.rate, c.ticks, c.dt, got, c.want)
		}
	}
}

func TestDemandPatterns(t *testing.T) {
	sk, err := Skewed(3000, []Group{{1, 70}, {2, 20}, {7, 10}})
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{2100, 300, 300, 300.0 / 7}
	for e, w := range want {
		if got := sk(e, 0, 0); math.Abs(got-w) > 1e-9 {
			t.Errorf("skewed: Envoy %d sends %v, want %v", e, got, w)
		}
	}
	if sk(10, 0, 0) != 0 {
		t.Error("an Envoy past the groups sends")
	}
	sh := Shifting(sk, 10, 5*time.Second)
	if sh(0, 0, 4*time.Second) != 2100 || sh(1, 0, 5*time.Second) != 2100 || sh(0, 0, 50*time.Second) != 2100 || sh(0, 0, 5*time.Second) != 300.0/7 {
		t.Error("shifting does not move the heavy Envoy one along per period")
	}
	idle := IdleAt(sk, 0, 10*time.Second)
	if idle(0, 0, 9*time.Second) != 2100 || idle(0, 0, 10*time.Second) != 0 || idle(1, 0, 10*time.Second) != 300 {
		t.Error("IdleAt idles the wrong Envoy or at the wrong time")
	}
	if Spread(1000, 4)(3, 0, 0) != 250 {
		t.Error("spread is not equal")
	}
	for _, g := range [][]Group{nil, {{0, 1}}, {{1, -1}}, {{1, 0}}} {
		if _, err := Skewed(100, g); err == nil {
			t.Errorf("skewed accepted groups %v", g)
		}
	}
}
