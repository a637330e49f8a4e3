package alloc_test

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/alloc"
)

func TestPlanFor(t *testing.T) {
	t.Parallel()
	withNoMatch := func(n alloc.NoMatch) alloc.Options {
		o := alloc.DefaultOptions()
		o.NoMatch = n
		return o
	}
	o := alloc.DefaultOptions()
	cases := []struct {
		name string
		rule *engine.RateLimit
		o    alloc.Options
		want alloc.Plan
	}{
		{"no rule, no assignment", nil, o, alloc.Plan{Kind: alloc.PlanNone}},
		{"no rule, allow", nil, withNoMatch(alloc.NoMatchAllow), alloc.Plan{Kind: alloc.PlanAllow}},
		{"no rule, deny", nil, withNoMatch(alloc.NoMatchDeny), alloc.Plan{Kind: alloc.PlanDeny}},
		{"unlimited", &engine.RateLimit{Unlimited: true}, o, alloc.Plan{Kind: alloc.PlanAllow}},
		{"zero", &engine.RateLimit{RequestsPerUnit: 0, Unit: engine.UnitSecond}, o, alloc.Plan{Kind: alloc.PlanDeny}},
		{"shadow", &engine.RateLimit{RequestsPerUnit: 120, Unit: engine.UnitMinute, ShadowMode: true}, o,
			alloc.Plan{Kind: alloc.PlanAllow, Limit: 2, Shadow: true}},
		{"shadow of zero still allows", &engine.RateLimit{Unit: engine.UnitSecond, ShadowMode: true}, o,
			alloc.Plan{Kind: alloc.PlanAllow, Shadow: true}},
		{"per second", &engine.RateLimit{RequestsPerUnit: 1000, Unit: engine.UnitSecond}, o, alloc.Plan{Kind: alloc.PlanDivide, Limit: 1000}},
		{"per hour", &engine.RateLimit{RequestsPerUnit: 7200, Unit: engine.UnitHour}, o, alloc.Plan{Kind: alloc.PlanDivide, Limit: 2}},
		{"sliding window", &engine.RateLimit{RequestsPerUnit: 60, Unit: engine.UnitMinute, Algorithm: engine.SlidingWindow}, o,
			alloc.Plan{Kind: alloc.PlanDivide, Limit: 1}},
		{"token bucket holds requests_per_unit", &engine.RateLimit{RequestsPerUnit: 600, Unit: engine.UnitMinute, Algorithm: engine.TokenBucket}, o,
			alloc.Plan{Kind: alloc.PlanDivide, Limit: 10, Burst: 600}},
		{"token bucket with a burst", &engine.RateLimit{RequestsPerUnit: 600, Unit: engine.UnitMinute, Algorithm: engine.TokenBucket, Burst: 50}, o,
			alloc.Plan{Kind: alloc.PlanDivide, Limit: 10, Burst: 50}},
		{"not a window", &engine.RateLimit{RequestsPerUnit: 5}, withNoMatch(alloc.NoMatchDeny), alloc.Plan{Kind: alloc.PlanDeny}},
		{"unvalidated no-match is none", nil, withNoMatch(200), alloc.Plan{Kind: alloc.PlanNone}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := alloc.PlanFor(c.rule, c.o); got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestAssign(t *testing.T) {
	t.Parallel()
	o := alloc.DefaultOptions()
	burst2 := o
	burst2.Burst = 2 * time.Second
	div := alloc.Plan{Kind: alloc.PlanDivide, Limit: 1000}
	tb := func(maxTokens, perFill uint32, every time.Duration) alloc.Strategy {
		return alloc.Strategy{Kind: alloc.TokenBucket, MaxTokens: maxTokens, TokensPerFill: perFill, FillInterval: every}
	}
	cases := []struct {
		name   string
		plan   alloc.Plan
		share  float64
		o      alloc.Options
		want   alloc.Strategy
		wantOK bool
	}{
		{"none", alloc.Plan{}, 5, o, alloc.Strategy{}, false},
		{"allow", alloc.Plan{Kind: alloc.PlanAllow}, 0, o, alloc.Strategy{Kind: alloc.AllowAll}, true},
		{"deny", alloc.Plan{Kind: alloc.PlanDeny}, 5, o, alloc.Strategy{Kind: alloc.DenyAll}, true},
		{"rounded down", div, 350.9, o, tb(350, 350, time.Second), true},
		{"two seconds of burst", div, 100, burst2, tb(200, 100, time.Second), true},
		{"share above the limit is the limit", div, 5000, o, tb(1000, 1000, time.Second), true},
		{"under 1/s: whole seconds per token", div, 0.3, o, tb(1, 1, 4*time.Second), true},
		{"exactly one per 3 s", div, 1.0 / 3, o, tb(1, 1, 3*time.Second), true},
		{"below one per MaxFill", div, 0.5 / 3600, o, alloc.Strategy{Kind: alloc.DenyAll}, true},
		{"nothing", div, 0, o, alloc.Strategy{Kind: alloc.DenyAll}, true},
		{"NaN", div, math.NaN(), o, alloc.Strategy{Kind: alloc.DenyAll}, true},
		{"token-bucket rule: the share's part of its burst", alloc.Plan{Kind: alloc.PlanDivide, Limit: 10, Burst: 600}, 2.5, o, tb(150, 5, 2*time.Second), true},
		{"token-bucket rule: at least one token", alloc.Plan{Kind: alloc.PlanDivide, Limit: 10, Burst: 1}, 2.5, o, tb(1, 5, 2*time.Second), true},
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

// TestTTL: an assignment outlives a report period, a renewal period and
// the margin (an Envoy cut right after a renewal reopens its stream at its
// next report and is answered in time), in whole seconds; until a
// stream's period is known, Envoy's 5 s report timer is assumed.
func TestTTL(t *testing.T) {
	t.Parallel()
	o := alloc.DefaultOptions()
	cases := []struct {
		period, renew, ttl time.Duration
	}{
		{0, 1250 * time.Millisecond, 7 * time.Second}, // 5 s assumed: 5 + 1.25 + 0.25 + 0.3
		{-time.Second, 1250 * time.Millisecond, 7 * time.Second},
		{5 * time.Second, 1250 * time.Millisecond, 7 * time.Second},
		{200 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second}, // at least MinTTL
		{time.Second, 500 * time.Millisecond, 3 * time.Second},
		{2 * time.Second, 500 * time.Millisecond, 4 * time.Second},
		{10 * time.Second, 2 * time.Second, 13 * time.Second},
	}
	for _, c := range cases {
		if got := o.RenewEvery(c.period); got != c.renew {
			t.Errorf("RenewEvery(%v) = %v, want %v", c.period, got, c.renew)
		}
		got := o.AssignTTL(c.period)
		if got != c.ttl {
			t.Errorf("AssignTTL(%v) = %v, want %v", c.period, got, c.ttl)
		}
		p := c.period
		if p <= 0 {
			p = o.ReportPeriod
		}
		if got < p+o.RenewEvery(c.period)+o.Delivery+o.Margin || got%time.Second != 0 {
			t.Errorf("AssignTTL(%v) = %v does not outlive a report, a renewal and the margin in whole seconds", c.period, got)
		}
	}
}

func TestKeep(t *testing.T) {
	t.Parallel()
	tb := func(maxTokens, perFill uint32) alloc.Strategy {
		return alloc.Strategy{Kind: alloc.TokenBucket, MaxTokens: maxTokens, TokensPerFill: perFill, FillInterval: time.Second}
	}
	allow, deny := alloc.Strategy{Kind: alloc.AllowAll}, alloc.Strategy{Kind: alloc.DenyAll}
	cases := []struct {
		name      string
		cur, next alloc.Strategy
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
		if got := alloc.Keep(c.cur, c.next, 0.05); got != c.want {
			t.Errorf("%s: Keep = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	if err := alloc.DefaultOptions().Validate(); err != nil {
		t.Fatal(err)
	}
	var zero alloc.Options
	if err := zero.EnsureDefaults().Validate(); err != nil {
		t.Fatalf("zero options with defaults: %v", err)
	}
	bad := []func(*alloc.Options){
		func(o *alloc.Options) { o.Floor = 1.5 },
		func(o *alloc.Options) { o.Spare = math.NaN() },
		func(o *alloc.Options) { o.Hysteresis = 1 },
		func(o *alloc.Options) { o.Burst = -time.Second },
		func(o *alloc.Options) { o.MaxFill = 500 * time.Millisecond },
		func(o *alloc.Options) { o.ReportPeriod = 50 * time.Millisecond },
		func(o *alloc.Options) { o.Delivery = -time.Second },
		func(o *alloc.Options) { o.Margin = -time.Second },
		func(o *alloc.Options) { o.MinTTL = time.Millisecond },
		func(o *alloc.Options) { o.NoMatch = 9 },
	}
	for i, mutate := range bad {
		o := alloc.DefaultOptions()
		mutate(&o)
		if o.Validate() == nil {
			t.Errorf("bad option %d (%+v) validated", i, o)
		}
	}
	for _, s := range []string{"", "none", "allow_all", "deny_all"} {
		n, err := alloc.ParseNoMatch(s)
		if err != nil || (s != "" && n.String() != s) {
			t.Errorf("ParseNoMatch(%q) = %v, %v", s, n, err)
		}
	}
	if _, err := alloc.ParseNoMatch("ALLOW"); err == nil {
		t.Error("ParseNoMatch(ALLOW) accepted")
	}
}
