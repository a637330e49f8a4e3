package rlqs_test

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/rlqs"
)

func TestPlanFor(t *testing.T) {
	t.Parallel()
	withNoMatch := func(n rlqs.NoMatch) rlqs.Options {
		o := rlqs.DefaultOptions()
		o.NoMatch = n
		return o
	}
	o := rlqs.DefaultOptions()
	cases := []struct {
		name string
		rule *engine.RateLimit
		o    rlqs.Options
		want rlqs.Plan
	}{
		{"no rule, no assignment", nil, o, rlqs.Plan{Kind: rlqs.PlanNone}},
		{"no rule, allow", nil, withNoMatch(rlqs.NoMatchAllow), rlqs.Plan{Kind: rlqs.PlanAllow}},
		{"no rule, deny", nil, withNoMatch(rlqs.NoMatchDeny), rlqs.Plan{Kind: rlqs.PlanDeny}},
		{"unlimited", &engine.RateLimit{Unlimited: true}, o, rlqs.Plan{Kind: rlqs.PlanAllow}},
		{"zero", &engine.RateLimit{RequestsPerUnit: 0, Unit: engine.UnitSecond}, o, rlqs.Plan{Kind: rlqs.PlanDeny}},
		{"shadow", &engine.RateLimit{RequestsPerUnit: 120, Unit: engine.UnitMinute, ShadowMode: true}, o,
			rlqs.Plan{Kind: rlqs.PlanAllow, Limit: 2, Shadow: true}},
		{"shadow of zero still allows", &engine.RateLimit{Unit: engine.UnitSecond, ShadowMode: true}, o,
			rlqs.Plan{Kind: rlqs.PlanAllow, Shadow: true}},
		{"per second", &engine.RateLimit{RequestsPerUnit: 1000, Unit: engine.UnitSecond}, o, rlqs.Plan{Kind: rlqs.PlanDivide, Limit: 1000}},
		{"per hour", &engine.RateLimit{RequestsPerUnit: 7200, Unit: engine.UnitHour}, o, rlqs.Plan{Kind: rlqs.PlanDivide, Limit: 2}},
		{"sliding window", &engine.RateLimit{RequestsPerUnit: 60, Unit: engine.UnitMinute, Algorithm: engine.SlidingWindow}, o,
			rlqs.Plan{Kind: rlqs.PlanDivide, Limit: 1}},
		{"token bucket holds requests_per_unit", &engine.RateLimit{RequestsPerUnit: 600, Unit: engine.UnitMinute, Algorithm: engine.TokenBucket}, o,
			rlqs.Plan{Kind: rlqs.PlanDivide, Limit: 10, Burst: 600}},
		{"token bucket with a burst", &engine.RateLimit{RequestsPerUnit: 600, Unit: engine.UnitMinute, Algorithm: engine.TokenBucket, Burst: 50}, o,
			rlqs.Plan{Kind: rlqs.PlanDivide, Limit: 10, Burst: 50}},
		{"not a window", &engine.RateLimit{RequestsPerUnit: 5}, withNoMatch(rlqs.NoMatchDeny), rlqs.Plan{Kind: rlqs.PlanDeny}},
		{"unvalidated no-match is none", nil, withNoMatch(200), rlqs.Plan{Kind: rlqs.PlanNone}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := rlqs.PlanFor(c.rule, c.o); got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestAssign(t *testing.T) {
	t.Parallel()
	o := rlqs.DefaultOptions()
	burst2 := o
	burst2.Burst = 2 * time.Second
	div := rlqs.Plan{Kind: rlqs.PlanDivide, Limit: 1000}
	tb := func(maxTokens, perFill uint32, every time.Duration) rlqs.Strategy {
		return rlqs.Strategy{Kind: rlqs.TokenBucket, MaxTokens: maxTokens, TokensPerFill: perFill, FillInterval: every}
	}
	cases := []struct {
		name   string
		plan   rlqs.Plan
		share  float64
		o      rlqs.Options
		want   rlqs.Strategy
		wantOK bool
	}{
		{"none", rlqs.Plan{}, 5, o, rlqs.Strategy{}, false},
		{"allow", rlqs.Plan{Kind: rlqs.PlanAllow}, 0, o, rlqs.Strategy{Kind: rlqs.AllowAll}, true},
		{"deny", rlqs.Plan{Kind: rlqs.PlanDeny}, 5, o, rlqs.Strategy{Kind: rlqs.DenyAll}, true},
		{"rounded down", div, 350.9, o, tb(350, 350, time.Second), true},
		{"two seconds of burst", div, 100, burst2, tb(200, 100, time.Second), true},
		{"share above the limit is the limit", div, 5000, o, tb(1000, 1000, time.Second), true},
		{"under 1/s: whole seconds per token", div, 0.3, o, tb(1, 1, 4*time.Second), true},
		{"exactly one per 3 s", div, 1.0 / 3, o, tb(1, 1, 3*time.Second), true},
		{"below one per MaxFill", div, 0.5 / 3600, o, rlqs.Strategy{Kind: rlqs.DenyAll}, true},
		{"nothing", div, 0, o, rlqs.Strategy{Kind: rlqs.DenyAll}, true},
		{"NaN", div, math.NaN(), o, rlqs.Strategy{Kind: rlqs.DenyAll}, true},
		{"token-bucket rule: the share's part of its burst", rlqs.Plan{Kind: rlqs.PlanDivide, Limit: 10, Burst: 600}, 2.5, o, tb(150, 5, 2*time.Second), true},
		{"token-bucket rule: at least one token", rlqs.Plan{Kind: rlqs.PlanDivide, Limit: 10, Burst: 1}, 2.5, o, tb(1, 5, 2*time.Second), true},
		{"a small share over whole seconds: 4 per 3 s", div, 1.34, o, tb(1, 4, 3*time.Second), true},
		{"under 1 % lost: per second", div, 150.9, o, tb(150, 150, time.Second), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, ok := c.plan.Assign(c.share, c.o)
			if got != c.want || ok != c.wantOK {
				t.Fatalf("got %+v %v, want %+v %v", got, ok, c.want, c.wantOK)
			}
		})
	}
}

func TestTTL(t *testing.T) {
	t.Parallel()
	o := rlqs.DefaultOptions()
	cases := []struct {
		every, want time.Duration
	}{
		{0, 2 * time.Second},
		{200 * time.Millisecond, 2 * time.Second},
		{time.Second, 3 * time.Second},
		{1100 * time.Millisecond, 4 * time.Second},
		{10 * time.Second, 30 * time.Second},
		{-time.Second, 2 * time.Second},
	}
	for _, c := range cases {
		if got := o.TTL(c.every); got != c.want {
			t.Errorf("TTL(%v) = %v, want %v", c.every, got, c.want)
		}
	}
}

func TestKeep(t *testing.T) {
	t.Parallel()
	tb := func(maxTokens, perFill uint32) rlqs.Strategy {
		return rlqs.Strategy{Kind: rlqs.TokenBucket, MaxTokens: maxTokens, TokensPerFill: perFill, FillInterval: time.Second}
	}
	allow, deny := rlqs.Strategy{Kind: rlqs.AllowAll}, rlqs.Strategy{Kind: rlqs.DenyAll}
	cases := []struct {
		name      string
		cur, next rlqs.Strategy
		want      bool
	}{
		{"same", tb(100, 100), tb(100, 100), true},
		{"same blanket", deny, deny, true},
		{"a little more: keep", tb(100, 100), tb(104, 104), true},
		{"enough more: change", tb(100, 100), tb(106, 106), false},
		{"less: change at once", tb(100, 100), tb(99, 99), false},
		{"bigger bucket now: keep", tb(100, 100), tb(120, 102), true},
		{"bucket would shrink: change", tb(100, 100), tb(99, 102), false},
		{"to a blanket rule", tb(100, 100), deny, false},
		{"from a blanket rule", allow, tb(100, 100), false},
	}
	for _, c := range cases {
		if got := rlqs.Keep(c.cur, c.next, 0.05); got != c.want {
			t.Errorf("%s: Keep = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	if err := rlqs.DefaultOptions().Validate(); err != nil {
		t.Fatal(err)
	}
	var zero rlqs.Options
	if err := zero.EnsureDefaults().Validate(); err != nil {
		t.Fatalf("zero options with defaults: %v", err)
	}
	bad := []func(*rlqs.Options){
		func(o *rlqs.Options) { o.Floor = 1.5 },
		func(o *rlqs.Options) { o.Spare = math.NaN() },
		func(o *rlqs.Options) { o.Hysteresis = 1 },
		func(o *rlqs.Options) { o.Burst = -time.Second },
		func(o *rlqs.Options) { o.MaxFill = 500 * time.Millisecond },
		func(o *rlqs.Options) { o.TTLReports = -1 },
		func(o *rlqs.Options) { o.MinTTL = time.Millisecond },
		func(o *rlqs.Options) { o.NoMatch = 9 },
	}
	for i, mutate := range bad {
		o := rlqs.DefaultOptions()
		mutate(&o)
		if o.Validate() == nil {
			t.Errorf("bad option %d (%+v) validated", i, o)
		}
	}
	for _, s := range []string{"", "none", "allow_all", "deny_all"} {
		n, err := rlqs.ParseNoMatch(s)
		if err != nil || (s != "" && n.String() != s) {
			t.Errorf("ParseNoMatch(%q) = %v, %v", s, n, err)
		}
	}
	if _, err := rlqs.ParseNoMatch("ALLOW"); err == nil {
		t.Error("ParseNoMatch(ALLOW) accepted")
	}
}
