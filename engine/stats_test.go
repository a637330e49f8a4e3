package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testenv"
)

type counts struct{ total, over, near, within, shadow, local uint64 }

func (f *fixture) counts(key string) counts {
	p := "ratelimit.service.rate_limit." + key + "."
	v := f.stats.CounterValue
	return counts{v(p + "total_hits"), v(p + "over_limit"), v(p + "near_limit"), v(p + "within_limit"), v(p + "shadow_mode"), v(p + "over_limit_with_local_cache")}
}

func (c counts) minus(o counts) counts {
	return counts{c.total - o.total, c.over - o.over, c.near - o.near, c.within - o.within, c.shadow - o.shadow, c.local - o.local}
}

// mapCache is an OverLimitCache for tests.
type mapCache struct {
	mu sync.Mutex
	m  map[string]time.Duration
}

func (c *mapCache) Contains(k string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.m[k]
	return ok
}
func (c *mapCache) Add(k string, ttl time.Duration) {
	c.mu.Lock()
	c.m[k] = ttl
	c.mu.Unlock()
}

// TestStatsArithmetic covers the worked examples of ratelimit-compat.md §4.4:
// prior hits bring the counter to `before`, then one measured request.
func TestStatsArithmetic(t *testing.T) {
	t.Parallel()
	const yaml = `domain: s
descriptors:
  - {key: l20, rate_limit: {unit: second, requests_per_unit: 20}}
  - {key: l8, rate_limit: {unit: second, requests_per_unit: 8}}
  - {key: sh, shadow_mode: true, rate_limit: {unit: second, requests_per_unit: 20}}
`
	cases := []struct {
		name       string
		key        string
		prior      uint64
		hits       uint64
		wantCode   engine.Code
		wantRemain uint32
		want       counts
	}{
		{"within", "l20", 2, 3, engine.CodeOK, 15, counts{total: 3, within: 3}},
		{"crosses near", "l8", 5, 2, engine.CodeOK, 1, counts{total: 2, near: 1, within: 2}},
		{"all near", "l20", 16, 3, engine.CodeOK, 1, counts{total: 3, near: 3, within: 3}},
		{"crosses limit from near", "l20", 19, 3, engine.CodeOverLimit, 0, counts{total: 3, over: 2, near: 1}},
		{"crosses limit from below near", "l20", 15, 7, engine.CodeOverLimit, 0, counts{total: 7, over: 2, near: 4}},
		{"already over", "l20", 25, 3, engine.CodeOverLimit, 0, counts{total: 3, over: 3}},
		{"exactly at limit", "l20", 17, 3, engine.CodeOK, 0, counts{total: 3, near: 3, within: 3}},
		{"shadow crossing", "sh", 19, 3, engine.CodeOK, 0, counts{total: 3, over: 2, near: 1, shadow: 2}},
		{"shadow already over", "sh", 22, 3, engine.CodeOK, 0, counts{total: 3, over: 3, shadow: 3}},
		{"check only at limit", "l20", 20, 0, engine.CodeOK, 0, counts{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			cfg, err := f.svc.LoadConfig([]engine.ConfigFile{{Name: "s", YAML: []byte(yaml)}}, false)
			if err != nil {
				t.Fatal(err)
			}
			f.svc.SetConfig(cfg)
			if tc.prior > 0 {
				r := req("s", kv(tc.key, "x"))
				r.Descriptors[0].HitsAddend = u64(tc.prior)
				f.do(t, r)
			}
			before := f.counts("s." + tc.key)
			r := req("s", kv(tc.key, "x"))
			r.Descriptors[0].HitsAddend = u64(tc.hits)
			st := f.do(t, r).Statuses[0]
			if st.Code != tc.wantCode || st.LimitRemaining != tc.wantRemain {
				t.Errorf("status %v remaining %d, want %v %d", st.Code, st.LimitRemaining, tc.wantCode, tc.wantRemain)
			}
			if got := f.counts("s." + tc.key).minus(before); got != tc.want {
				t.Errorf("stats %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestStatsObservedKTwo(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "probe.yaml")
	for i := 0; i < 3; i++ {
		f.do(t, req("probe", kv("k", "two")))
	}
	if got := f.counts("probe.k_two"); got != (counts{total: 3, over: 1, near: 1, within: 2}) {
		t.Fatalf("k_two %+v", got)
	}
	// Shadow: over_limit and shadow_mode +1 on each of the 2nd and 3rd.
	for i := 0; i < 3; i++ {
		f.do(t, req("probe", kv("shadow", "a")))
	}
	if got := f.counts("probe.shadow"); got.over != 2 || got.shadow != 2 || got.within != 1 {
		t.Fatalf("shadow %+v", got)
	}
	// Unknown domain counts domain_not_found once per descriptor.
	f.do(t, req("nope", kv("a", "b"), kv("c", "d")))
	if got := f.stats.CounterValue("ratelimit.service.rate_limit.nope.domain_not_found"); got != 2 {
		t.Fatalf("domain_not_found %d", got)
	}
}

func TestLocalCache(t *testing.T) {
	t.Parallel()
	cache := &mapCache{m: map[string]time.Duration{}}
	f := newFixture(t, func(o *engine.Options) { o.LocalCache = cache }, "probe.yaml")
	for i := 0; i < 3; i++ {
		f.do(t, req("probe", kv("k", "two")))
	}
	if ttl := cache.m["probe_k_two_1795313460"]; ttl != time.Minute {
		t.Fatalf("cached ttl %v (cache %v)", ttl, cache.m)
	}
	calls := f.counter.calls
	for i := 0; i < 3; i++ {
		if st := f.do(t, req("probe", kv("k", "two"))).Statuses[0]; st.Code != engine.CodeOverLimit {
			t.Fatalf("local cache hit answered %v", st.Code)
		}
	}
	if f.counter.calls != calls {
		t.Fatalf("local cache hits reached the backend: %d calls", f.counter.calls-calls)
	}
	if got := f.counts("probe.k_two"); got.local != 3 || got.over != 4 || got.total != 6 {
		t.Fatalf("stats %+v", got)
	}
}

func TestDetailedAndValueToMetric(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "rl.yaml")
	f.do(t, req("rl", kv("user", "alice")))
	f.do(t, req("rl", kv("path", "/api/v1")))
	f.do(t, req("rl", kv("tenant", "t-9")))
	f.do(t, req("rl", kv("foo", "f", "bar", "xyz")))
	for key, want := range map[string]uint64{
		"rl.user_alice":   1, // detailed_metric: request value
		"rl.path_/api/v1": 1, // value_to_metric on a wildcard level
		"rl.tenant_t-*":   1, // wildcard keeps its pattern
		"rl.foo_f.bar":    1, // key-only rule rolls values into the key
	} {
		if got := f.counts(key).total; got != want {
			t.Errorf("%s total_hits = %d, want %d", key, got, want)
		}
	}
	// Overrides are counted under the request's own key.
	r := req("rl", kv("a", "1", "b", ""))
	r.Descriptors[0].Limit = &engine.LimitOverride{RequestsPerUnit: 5, Unit: engine.UnitMinute}
	f.do(t, r)
	if got := f.counts("rl.a_1.b").total; got != 1 {
		t.Errorf("override stats %d", got)
	}
}

func TestStatNamesAreSanitized(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	cfg, err := f.svc.LoadConfig([]engine.ConfigFile{{Name: "s", YAML: []byte("domain: d\ndescriptors:\n  - {key: remote_address, detailed_metric: true, rate_limit: {unit: second, requests_per_unit: 9}}\n")}}, false)
	if err != nil {
		t.Fatal(err)
	}
	f.svc.SetConfig(cfg)
	f.do(t, req("d", kv("remote_address", "10.0.0.1")))
	f.do(t, req("d", kv("remote_address", "a:b|c")))
	for _, key := range []string{"d.remote_address_10_0_0_1", "d.remote_address_a_b_c"} {
		if got := f.counts(key).total; got != 1 {
			t.Errorf("%s = %d", key, got)
		}
	}
}

func ExampleService_ShouldRateLimit() {
	clk := testenv.NewClock(t0)
	o := engine.DefaultOptions()
	o.Counter = &backendCounter{b: newMemory(clk)}
	o.Clock = clk.Now
	svc, _ := engine.NewService(o)
	cfg, _ := svc.LoadConfig([]engine.ConfigFile{{Name: "ex", YAML: []byte("domain: ex\ndescriptors:\n  - {key: user, rate_limit: {unit: minute, requests_per_unit: 1}}\n")}}, false)
	svc.SetConfig(cfg)
	for i := 0; i < 2; i++ {
		resp, _ := svc.ShouldRateLimit(context.Background(), &engine.Request{Domain: "ex", Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: "user", Value: "ann"}}}}})
		fmt.Println(resp.OverallCode)
	}
	// Output:
	// OK
	// OVER_LIMIT
}
