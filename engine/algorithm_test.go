package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
)

func TestAlgorithmConfig(t *testing.T) {
	t.Parallel()
	bad := []struct{ rateLimit, want string }{
		{"{unit: second, requests_per_unit: 1, algorithm: leaky_bucket}", "invalid rate limit algorithm 'leaky_bucket' (want fixed_window, sliding_window or token_bucket)"},
		{"{unit: second, requests_per_unit: 1, burst: 4}", "burst is only valid with algorithm token_bucket, not fixed_window"},
		{"{unit: second, requests_per_unit: 1, algorithm: sliding_window, burst: 4}", "burst is only valid with algorithm token_bucket, not sliding_window"},
		{"{unlimited: true, algorithm: token_bucket}", "should not specify rate limit algorithm when unlimited"},
		{"{unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 0}", "burst of token bucket rule 'd.k' must be at least 1 (leave it out for requests_per_unit)"},
		{"{unit: second, requests_per_unit: 1, burst: 0}", "burst is only valid with algorithm token_bucket, not fixed_window"},
	}
	for _, tc := range bad {
		_, err := engine.LoadConfig([]engine.ConfigFile{{Name: "f.yaml", YAML: []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: " + tc.rateLimit + "\n")}}, engine.ConfigOptions{})
		if err == nil || err.Error() != "f.yaml: "+tc.want {
			t.Errorf("%s: error %v, want %q", tc.rateLimit, err, tc.want)
		}
	}
	f := newFixture(t, nil, "algorithms.yaml")
	want := `algo.fw: unit=MINUTE requests_per_unit=10, shadow_mode: false, quota_mode: false
algo.sw: unit=MINUTE requests_per_unit=10, shadow_mode: false, quota_mode: false, algorithm: sliding_window
algo.swquota: unit=MINUTE requests_per_unit=1, shadow_mode: false, quota_mode: true, algorithm: sliding_window
algo.tb: unit=SECOND requests_per_unit=1, shadow_mode: false, quota_mode: false, algorithm: token_bucket, burst: 3
algo.tbquota: unit=SECOND requests_per_unit=1, shadow_mode: false, quota_mode: true, algorithm: token_bucket, burst: 1
algo.tbshadow: unit=SECOND requests_per_unit=1, shadow_mode: true, quota_mode: false, algorithm: token_bucket, burst: 1
`
	if got := f.svc.Config().Dump(); got != want {
		t.Fatalf("dump:\n%s\nwant:\n%s", got, want)
	}
}

func headerMap(r *engine.Response) string {
	var parts []string
	for _, h := range r.Headers {
		parts = append(parts, h.Key+"="+h.Value)
	}
	return strings.Join(parts, " ")
}

func TestTokenBucketDecisions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(o *engine.Options) { o.Headers.Enabled = true }, "algorithms.yaml")
	r := func() *engine.Request { return req("algo", kv("tb", "x")) }
	type step struct {
		advance   time.Duration
		code      engine.Code
		remaining uint32
		reset     time.Duration
		headers   string
	}
	steps := []step{
		{0, engine.CodeOK, 2, time.Second, "RateLimit-Limit=1 RateLimit-Remaining=2 RateLimit-Reset=1"},
		{0, engine.CodeOK, 1, time.Second, "RateLimit-Limit=1 RateLimit-Remaining=1 RateLimit-Reset=1"},
		{0, engine.CodeOK, 0, time.Second, "RateLimit-Limit=1 RateLimit-Remaining=0 RateLimit-Reset=1"},
		{0, engine.CodeOverLimit, 0, time.Second, "RateLimit-Limit=1 RateLimit-Remaining=0 RateLimit-Reset=1"},
		{600 * time.Millisecond, engine.CodeOverLimit, 0, 400 * time.Millisecond, "RateLimit-Limit=1 RateLimit-Remaining=0 RateLimit-Reset=1"},
		// The refused requests took nothing: one token is back after 1 s.
		{400 * time.Millisecond, engine.CodeOK, 0, time.Second, "RateLimit-Limit=1 RateLimit-Remaining=0 RateLimit-Reset=1"},
		// After 3.5 s idle the bucket is full again: 2 left after this one.
		{3500 * time.Millisecond, engine.CodeOK, 2, time.Second, "RateLimit-Limit=1 RateLimit-Remaining=2 RateLimit-Reset=1"},
		// Half a token back, one taken: 1.5 tokens owed, 1 left, 0.5 s to the next.
		{500 * time.Millisecond, engine.CodeOK, 1, 500 * time.Millisecond, "RateLimit-Limit=1 RateLimit-Remaining=1 RateLimit-Reset=1"},
	}
	for i, s := range steps {
		f.clock.Add(s.advance)
		resp := f.do(t, r())
		st := resp.Statuses[0]
		if st.Code != s.code || st.LimitRemaining != s.remaining || st.DurationUntilReset != s.reset || headerMap(resp) != s.headers {
			t.Fatalf("step %d: %v remaining %d reset %v headers %q; want %v %d %v %q", i, st.Code, st.LimitRemaining, st.DurationUntilReset, headerMap(resp), s.code, s.remaining, s.reset, s.headers)
		}
	}
	ops := f.counter.ops[0]
	if len(ops) != 1 || ops[0].Key != "algo_tb_x_tb" || ops[0].Kind != engine.OpTokenBucket || ops[0].Bucket.Interval != 1e6 || ops[0].Bucket.Burst != 3 {
		t.Fatalf("op %+v", ops)
	}
	// Stats are the usual counters: 6 within, 2 over.
	if got := f.stats.Counter("ratelimit.service.rate_limit.algo.tb.within_limit").Value(); got != 6 {
		t.Errorf("within_limit %d", got)
	}
	if got := f.stats.Counter("ratelimit.service.rate_limit.algo.tb.over_limit").Value(); got != 2 {
		t.Errorf("over_limit %d", got)
	}
}

func TestTokenBucketWithEngineFeatures(t *testing.T) {
	t.Parallel()
	t.Run("hits_addend 0 checks without taking", func(t *testing.T) {
		f := newFixture(t, nil, "algorithms.yaml")
		r := req("algo", kv("tb", "x"))
		r.Descriptors[0].HitsAddend = u64(0)
		for range 5 {
			if st := f.do(t, r).Statuses[0]; st.Code != engine.CodeOK || st.LimitRemaining != 3 {
				t.Fatalf("%+v", st)
			}
		}
		r.Descriptors[0].HitsAddend = u64(3)
		if st := f.do(t, r).Statuses[0]; st.Code != engine.CodeOK || st.LimitRemaining != 0 {
			t.Fatalf("3 hits: %+v", st)
		}
	})
	t.Run("hits_addend above the burst is the caller's error", func(t *testing.T) {
		f := newFixture(t, nil, "algorithms.yaml")
		r := req("algo", kv("tb", "x"))
		r.Descriptors[0].HitsAddend = u64(4)
		_, err := f.svc.ShouldRateLimit(context.Background(), r)
		want := "hits_addend 4 is more than the burst 3 of token bucket rule 'algo.tb': it can never be admitted"
		if !errors.Is(err, engine.ErrInvalidRequest) || err.Error() != want {
			t.Fatalf("error %v, want ErrInvalidRequest %q", err, want)
		}
		if len(f.counter.ops) != 0 {
			t.Fatalf("the store was asked: %+v", f.counter.ops)
		}
		// The whole burst at once is admitted.
		r.Descriptors[0].HitsAddend = u64(3)
		if st := f.do(t, r).Statuses[0]; st.Code != engine.CodeOK || st.LimitRemaining != 0 {
			t.Fatalf("3 hits: %+v", st)
		}
	})
	t.Run("shadow mode answers OK and counts shadow_mode", func(t *testing.T) {
		f := newFixture(t, nil, "algorithms.yaml")
		for range 2 {
			f.do(t, req("algo", kv("tbshadow", "x")))
		}
		if resp := f.do(t, req("algo", kv("tbshadow", "x"))); resp.OverallCode != engine.CodeOK {
			t.Fatal(showAll(resp))
		}
		if got := f.stats.Counter("ratelimit.service.rate_limit.algo.tbshadow.shadow_mode").Value(); got != 2 {
			t.Fatalf("shadow_mode %d", got)
		}
	})
	t.Run("a request override keeps the rule's algorithm", func(t *testing.T) {
		f := newFixture(t, nil, "algorithms.yaml")
		r := req("algo", kv("tb", "x"))
		r.Descriptors[0].Limit = &engine.LimitOverride{RequestsPerUnit: 4, Unit: engine.UnitSecond}
		f.do(t, r)
		if op := f.counter.ops[0][0]; op.Kind != engine.OpTokenBucket || op.Bucket.Interval != 250000 || op.Bucket.Burst != 3 {
			t.Fatalf("override op %+v", op)
		}
	})
	t.Run("local over-limit cache holds the key until a token is back", func(t *testing.T) {
		lc := &mapCache{m: map[string]time.Duration{}}
		f := newFixture(t, func(o *engine.Options) { o.LocalCache = lc }, "algorithms.yaml")
		for range 4 {
			f.do(t, req("algo", kv("tb", "x")))
		}
		if lc.m["algo_tb_x_tb"] != time.Second {
			t.Fatalf("cache %v", lc.m)
		}
		calls := f.counter.calls
		if st := f.do(t, req("algo", kv("tb", "x"))).Statuses[0]; st.Code != engine.CodeOverLimit || f.counter.calls != calls {
			t.Fatalf("cached key: %+v, calls %d → %d", st, calls, f.counter.calls)
		}
	})
	t.Run("stop-increment mode takes no token from the other descriptors of a refused request", func(t *testing.T) {
		f := newFixture(t, func(o *engine.Options) { o.StopIncrementOnLimit = true }, "algorithms.yaml")
		f.do(t, req("algo", kv("tbshadow", "y"))) // shadow: the bucket of y is now empty
		for i := range 3 {
			resp := f.do(t, req("algo", kv("tb", "x"), kv("tbshadow", "y")))
			if st := resp.Statuses[1]; st.Code != engine.CodeOK { // shadow mode
				t.Fatalf("%d: %s", i, showAll(resp))
			}
		}
		// Nothing was taken from x: its bucket is full.
		r := req("algo", kv("tb", "x"))
		r.Descriptors[0].HitsAddend = u64(0)
		if st := f.do(t, r).Statuses[0]; st.LimitRemaining != 3 {
			t.Fatalf("x after refused requests: %+v", st)
		}
	})
}

func TestSlidingWindowDecisions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "algorithms.yaml") // t0 is 4 s into a minute
	r := func() *engine.Request { return req("algo", kv("sw", "x")) }
	for i := range 11 {
		st := f.do(t, r()).Statuses[0]
		if want := engine.CodeOK; i == 10 {
			if st.Code != engine.CodeOverLimit {
				t.Fatalf("11th: %+v", st)
			}
		} else if st.Code != want || st.LimitRemaining != uint32(9-i) || st.DurationUntilReset != 56*time.Second {
			t.Fatalf("%d: %+v", i, st)
		}
	}
	// 30 s into the next minute: 11 × 0.5 = 5 (rounded down) of the last
	// window still count, so 5 more fit.
	f.clock.Add(56*time.Second + 30*time.Second)
	for i := range 6 {
		st := f.do(t, r()).Statuses[0]
		if i < 5 && (st.Code != engine.CodeOK || st.LimitRemaining != uint32(4-i)) {
			t.Fatalf("next window %d: %+v", i, st)
		}
		if i == 5 {
			// Over: the estimate 11×left/60 + 6 is within 10 once left ≤ 21.8 s, in 8.18 s.
			if st.Code != engine.CodeOverLimit || st.DurationUntilReset.Round(10*time.Millisecond) != 8180*time.Millisecond {
				t.Fatalf("next window over: %+v", st)
			}
		}
	}
	last := f.counter.ops[len(f.counter.ops)-1]
	if len(last) != 2 || last[0].Kind != engine.OpAdd || last[0].TTL != 120*time.Second ||
		last[1].Kind != engine.OpGet || last[1].Key != "algo_sw_x_1795313460" {
		t.Fatalf("ops %+v", last)
	}
}

func TestAlgorithmsQuotaModeAndLocalCache(t *testing.T) {
	t.Parallel()
	t.Run("quota mode: over on one quota descriptor is OK while another passes", func(t *testing.T) {
		f := newFixture(t, nil, "algorithms.yaml")
		f.do(t, req("algo", kv("swquota", "x")))
		resp := f.do(t, req("algo", kv("swquota", "x"), kv("tbquota", "x")))
		if resp.OverallCode != engine.CodeOK || resp.Statuses[0].Code != engine.CodeOverLimit || resp.Statuses[1].Code != engine.CodeOK {
			t.Fatal(showAll(resp))
		}
		// Both over: the request is over.
		if resp := f.do(t, req("algo", kv("swquota", "x"), kv("tbquota", "x"))); resp.OverallCode != engine.CodeOverLimit {
			t.Fatal(showAll(resp))
		}
	})
	t.Run("sliding window: the local cache holds the key until the estimate is within the limit", func(t *testing.T) {
		lc := &mapCache{m: map[string]time.Duration{}}
		f := newFixture(t, func(o *engine.Options) { o.LocalCache = lc }, "algorithms.yaml")
		for range 11 {
			f.do(t, req("algo", kv("sw", "x")))
		}
		// In the window's own minute the count only grows: until its end, 56 s.
		if got := lc.m["algo_sw_x_1795313460"]; got != 56*time.Second {
			t.Fatalf("cache %v", lc.m)
		}
	})
}

// FuzzAlgorithmDecisions: any rule and request numbers decide without a
// panic or an overflow: a token bucket never reports more tokens left than
// it holds, and admits nothing larger than its burst.
func FuzzAlgorithmDecisions(f *testing.F) {
	f.Add(uint8(2), uint32(2), uint32(4), uint8(1), uint64(1), int64(300e6))
	f.Add(uint8(2), uint32(0), uint32(0), uint8(6), uint64(0), int64(0))
	f.Add(uint8(2), uint32(4e9), uint32(4e9), uint8(6), uint64(1<<63), int64(-1))
	f.Add(uint8(1), uint32(1), uint32(0), uint8(5), uint64(1<<40), int64(1e15))
	f.Fuzz(func(t *testing.T, algo uint8, rpu, burst uint32, unit uint8, hits uint64, advance int64) {
		a := engine.Algorithm(algo % 3)
		rl := &engine.RateLimitConfig{Unit: engine.Unit(1 + unit%7).String(), RequestsPerUnit: rpu, Algorithm: a.String()}
		if a == engine.TokenBucket {
			rl.Burst = &burst
		}
		cfg, err := engine.LoadConfig([]engine.ConfigFile{{Name: "f", Domain: &engine.DomainConfig{Domain: "d",
			Descriptors: []engine.DescriptorConfig{{Key: "k", RateLimit: rl}}}}}, engine.ConfigOptions{})
		if a == engine.TokenBucket && burst == 0 {
			if err == nil {
				t.Fatal("burst 0 loaded")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		fx := newFixture(t, nil)
		fx.svc.SetConfig(cfg)
		for range 3 {
			r := req("d", kv("k", "v"))
			r.Descriptors[0].HitsAddend = &hits
			resp, err := fx.svc.ShouldRateLimit(context.Background(), r)
			if hits > engine.MaxHitsAddend {
				// More than a counter can take: the caller's error.
				if !errors.Is(err, engine.ErrInvalidRequest) {
					t.Fatalf("hits %d: %v, want ErrInvalidRequest", hits, err)
				}
				return
			}
			if a == engine.TokenBucket && rpu > 0 && hits > uint64(burst) {
				if !errors.Is(err, engine.ErrInvalidRequest) {
					t.Fatalf("bucket burst %d hits %d: %v, want ErrInvalidRequest", burst, hits, err)
				}
				return
			}
			if a == engine.TokenBucket && errors.Is(err, engine.ErrInvalidRequest) && strings.Contains(err.Error(), "can never be admitted") {
				return // a burst capped for a very slow rate (burst × interval within 2^52 µs)
			}
			if err != nil {
				t.Fatal(err)
			}
			st := resp.Statuses[0]
			if a == engine.TokenBucket {
				cap := uint64(burst)
				if rpu == 0 {
					cap = 0
				}
				if uint64(st.LimitRemaining) > cap || st.Code == engine.CodeOK && hits > cap {
					t.Fatalf("bucket rpu %d burst %d hits %d: %+v", rpu, burst, hits, st)
				}
			}
			if st.DurationUntilReset < 0 {
				t.Fatalf("negative reset %+v", st)
			}
			fx.clock.Add(time.Duration(advance % int64(365*24*time.Hour)))
		}
	})
}
