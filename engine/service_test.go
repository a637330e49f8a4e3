package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/internal/testenv"
)

// show renders a status compactly, so expectations read like the spec's rows.
func show(st engine.DescriptorStatus) string {
	s := st.Code.String()
	if l := st.CurrentLimit; l != nil {
		s += fmt.Sprintf(" %d/%s", l.RequestsPerUnit, l.Unit)
		if l.Name != "" {
			s += " name=" + l.Name
		}
	}
	if st.LimitRemaining != 0 {
		s += fmt.Sprintf(" rem=%d", st.LimitRemaining)
	}
	if st.DurationUntilReset != 0 {
		s += fmt.Sprintf(" reset=%ds", int64(st.DurationUntilReset/time.Second))
	}
	return s
}

func showAll(r *engine.Response) string {
	parts := []string{r.OverallCode.String()}
	for _, st := range r.Statuses {
		parts = append(parts, show(st))
	}
	return strings.Join(parts, " | ")
}

// TestProbeTable walks the rows of ratelimit-compat.md §2.2 that are decided
// by the engine (HTTP-level rows are in transport's tests).
func TestProbeTable(t *testing.T) {
	t.Parallel()
	type step struct {
		req  *engine.Request
		want string
	}
	withHits := func(r *engine.Request, h uint32) *engine.Request { r.HitsAddend = h; return r }
	descHits := func(r *engine.Request, h uint64) *engine.Request { r.Descriptors[0].HitsAddend = u64(h); return r }
	override := func(r *engine.Request, rpu uint32, u engine.Unit) *engine.Request {
		r.Descriptors[0].Limit = &engine.LimitOverride{RequestsPerUnit: rpu, Unit: u}
		return r
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"minute limit: ok, ok (remaining 0), over", []step{
			{req("probe", kv("k", "two")), "OK | OK 2/MINUTE rem=1 reset=56s"},
			{req("probe", kv("k", "two")), "OK | OK 2/MINUTE reset=56s"},
			{req("probe", kv("k", "two")), "OVER_LIMIT | OVER_LIMIT 2/MINUTE reset=56s"},
		}},
		{"unknown domain", []step{{req("nope", kv("k", "two")), "OK | OK"}}},
		{"unlimited", []step{{req("probe", kv("free", "x")), "OK | OK rem=4294967295"}}},
		{"shadow mode: over is reported OK", []step{
			{req("probe", kv("shadow", "a")), "OK | OK 1/MINUTE reset=56s"},
			{req("probe", kv("shadow", "a")), "OK | OK 1/MINUTE reset=56s"},
			{req("probe", kv("shadow", "a")), "OK | OK 1/MINUTE reset=56s"},
		}},
		{"whitelisted key", []step{{req("probe", kv("nolimit", "x")), "OK | OK"}}},
		{"key not in config", []step{{req("probe", kv("zzz", "x")), "OK | OK"}}},
		{"limit 0", []step{{req("probe", kv("zero", "x")), "OVER_LIMIT | OVER_LIMIT 0/MINUTE reset=56s"}}},
		{"wildcard", []step{{req("probe", kv("wild", "prefix1")), "OK | OK 3/MINUTE rem=2 reset=56s"}}},
		{"wildcard does not match other prefix", []step{{req("probe", kv("wild", "xpre")), "OK | OK"}}},
		{"request hits 3", []step{{withHits(req("probe", kv("near", "a")), 3), "OK | OK 10/MINUTE rem=7 reset=56s"}}},
		{"descriptor hits 0 checks only", []step{
			{withHits(req("probe", kv("near", "a")), 8), "OK | OK 10/MINUTE rem=2 reset=56s"},
			{descHits(req("probe", kv("near", "a")), 0), "OK | OK 10/MINUTE rem=2 reset=56s"},
			{descHits(req("probe", kv("near", "a")), 5), "OVER_LIMIT | OVER_LIMIT 10/MINUTE reset=56s"},
		}},
		{"descriptor hits win over request hits", []step{
			{descHits(withHits(req("probe", kv("near", "b")), 9), 1), "OK | OK 10/MINUTE rem=9 reset=56s"},
		}},
		{"multiple descriptors", []step{
			{req("probe", kv("k", "two")), "OK | OK 2/MINUTE rem=1 reset=56s"},
			{req("probe", kv("k", "two")), "OK | OK 2/MINUTE reset=56s"},
			{req("probe", kv("k", "hour5"), kv("k", "two"), kv("free", "x"), kv("zzz", "x")),
				"OVER_LIMIT | OK 5/HOUR rem=4 reset=2936s | OVER_LIMIT 2/MINUTE reset=56s | OK rem=4294967295 | OK"},
		}},
		{"override on unconfigured key", []step{{override(req("probe", kv("zzz", "o")), 7, engine.UnitHour), "OK | OK 7/HOUR rem=6 reset=2936s"}}},
		{"override week", []step{{override(req("probe", kv("zzz", "w")), 7, engine.UnitWeek), "OK | OK 7/WEEK rem=6 reset=337736s"}}},
		{"override needs the domain", []step{{override(req("nope", kv("zzz", "o")), 7, engine.UnitHour), "OK | OK"}}},
		{"empty entries", []step{{req("probe", nil), "OK | OK"}}},
		{"depth mismatch", []step{{req("rl", kv("category", "account", "extra", "x")), "OK | OK"}}},
		{"replaces", []step{
			{req("rl", kv("foo", "f", "bar", "banned"), kv("source_cluster", "proxy", "destination_cluster", "override")),
				"OK | OK | OK 2/MINUTE rem=1 reset=56s"},
		}},
		{"banned alone, named limit 0", []step{
			{req("rl", kv("foo", "f", "bar", "banned")), "OVER_LIMIT | OVER_LIMIT 0/MINUTE name=banned_limit reset=56s"},
		}},
		{"nested key-only rule", []step{{req("rl", kv("foo", "f", "bar", "zz")), "OK | OK 10/MINUTE rem=9 reset=56s"}}},
		{"quota mode", []step{
			{req("rl", kv("service", "service_1"), kv("service", "service_2")), "OK | OK 1/MINUTE reset=56s | OK 2/MINUTE rem=1 reset=56s"},
			{req("rl", kv("service", "service_1"), kv("service", "service_2")), "OK | OVER_LIMIT 1/MINUTE reset=56s | OK 2/MINUTE reset=56s"},
			{req("rl", kv("service", "service_1"), kv("service", "service_2")), "OVER_LIMIT | OVER_LIMIT 1/MINUTE reset=56s | OVER_LIMIT 2/MINUTE reset=56s"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil, "probe.yaml", "rl.yaml")
			for i, s := range tc.steps {
				if got := showAll(f.do(t, s.req)); got != s.want {
					t.Errorf("step %d:\n got %s\nwant %s", i+1, got, s.want)
				}
			}
		})
	}
}

func TestRequestErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "probe.yaml")
	noCfg := newFixture(t, nil)
	cases := []struct {
		name string
		svc  *engine.Service
		req  *engine.Request
		kind error
		msg  string
	}{
		{"empty domain", f.svc, req("", kv("k", "two")), engine.ErrInvalidRequest, "rate limit domain must not be empty"},
		{"no descriptors", f.svc, req("probe"), engine.ErrInvalidRequest, "rate limit descriptor list must not be empty"},
		{"domain checked first", f.svc, req(""), engine.ErrInvalidRequest, "rate limit domain must not be empty"},
		{"no config", noCfg.svc, req("probe", kv("k", "two")), engine.ErrNoConfig, "no rate limit configuration loaded"},
		{"override with unknown unit", f.svc, &engine.Request{Domain: "probe", Descriptors: []engine.Descriptor{{Entries: kv("k", "x"), Limit: &engine.LimitOverride{RequestsPerUnit: 1}}}},
			engine.ErrInvalidRequest, "descriptor 0: limit override has an unknown unit (0)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.svc.ShouldRateLimit(context.Background(), tc.req)
			if !errors.Is(err, tc.kind) || err.Error() != tc.msg {
				t.Fatalf("got %v, want %q (%v)", err, tc.msg, tc.kind)
			}
		})
	}
	if got := f.stats.CounterValue("ratelimit.service.call.should_rate_limit.service_error"); got != 4 {
		t.Errorf("service_error = %d, want 4", got)
	}
}

func TestBackendErrorOnlyForCountedDescriptors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "probe.yaml")
	f.counter.err = errors.New("connection refused")
	_, err := f.svc.ShouldRateLimit(context.Background(), req("probe", kv("k", "two")))
	if !errors.Is(err, engine.ErrBackend) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("got %v", err)
	}
	if got := f.stats.CounterValue("ratelimit.service.call.should_rate_limit.redis_error"); got != 1 {
		t.Errorf("redis_error = %d", got)
	}
	// Unlimited and unmatched descriptors never reach the backend.
	if got := showAll(f.do(t, req("probe", kv("free", "x"), kv("zzz", "y")))); got != "OK | OK rem=4294967295 | OK" {
		t.Errorf("got %s", got)
	}
}

func TestCacheKeys(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		prefix string
		req    *engine.Request
		want   []string
	}{
		{"minute", "", req("probe", kv("k", "two")), []string{"probe_k_two_1795313460"}},
		{"empty value", "", req("probe", kv("near", "")), []string{"probe_near__1795313460"}},
		{"day", "", req("probe", kv("k", "day")), []string{"probe_k_day_1795305600"}},
		{"second with prefix", "pfx:", req("probe", kv("k", "persec")), []string{"pfx:probe_k_persec_1795313464"}},
		{"nested", "", req("rl", kv("source_cluster", "proxy", "destination_cluster", "override")),
			[]string{"rl_source_cluster_proxy_destination_cluster_override_1795313460"}},
		{"wildcard keeps the request value", "", req("probe", kv("wild", "prefix1")), []string{"probe_wild_prefix1_1795313460"}},
		{"share_threshold uses the pattern", "", req("rl", kv("tenant", "t-42")), []string{"rl_tenant_t-*_1795312800"}},
		{"week is epoch aligned", "", func() *engine.Request {
			r := req("probe", kv("zzz", "w"))
			r.Descriptors[0].Limit = &engine.LimitOverride{RequestsPerUnit: 1, Unit: engine.UnitWeek}
			return r
		}(), []string{"probe_zzz_w_1795046400"}},
		{"unlimited and replaced make no key", "", req("rl", kv("foo", "f", "bar", "banned"), kv("source_cluster", "proxy", "destination_cluster", "override")),
			[]string{"rl_source_cluster_proxy_destination_cluster_override_1795313460"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(o *engine.Options) { o.CacheKeyPrefix = tc.prefix }, "probe.yaml", "rl.yaml")
			f.do(t, tc.req)
			var got []string
			for _, call := range f.counter.ops {
				for _, op := range call {
					got = append(got, op.Key)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("keys %q, want %q", got, tc.want)
			}
		})
	}
}

func TestTTLAndJitter(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(o *engine.Options) {
		o.ExpirationJitterMax = 300 * time.Second
		o.Jitter = func(n int64) int64 {
			if n != 300 {
				t.Errorf("jitter bound %d", n)
			}
			return 299
		}
	}, "probe.yaml")
	f.do(t, req("probe", kv("k", "two"), kv("k", "day"), kv("k", "persec")))
	var ttls []time.Duration
	var perSecond []bool
	for _, op := range f.counter.ops[0] {
		ttls = append(ttls, op.TTL)
		perSecond = append(perSecond, op.PerSecond)
	}
	want := []time.Duration{359 * time.Second, (86400 + 299) * time.Second, 300 * time.Second}
	if !reflect.DeepEqual(ttls, want) || !reflect.DeepEqual(perSecond, []bool{false, false, true}) {
		t.Fatalf("ttls %v per-second %v", ttls, perSecond)
	}
}

func TestWindowsRollOverWithClock(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "probe.yaml")
	for i := 0; i < 3; i++ {
		f.do(t, req("probe", kv("k", "two")))
	}
	f.clock.Add(56 * time.Second) // next minute
	if got := showAll(f.do(t, req("probe", kv("k", "two")))); got != "OK | OK 2/MINUTE rem=1 reset=60s" {
		t.Fatalf("after rollover: %s", got)
	}
	f.clock.Add(59 * time.Second)
	if got := f.do(t, req("probe", kv("k", "persec"))).Statuses[0].DurationUntilReset; got != time.Second {
		t.Fatalf("second reset %v, want 1s", got)
	}
}

func TestGlobalShadowMode(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(o *engine.Options) { o.ShadowMode = true }, "probe.yaml")
	f.do(t, req("probe", kv("zero", "x")))
	resp := f.do(t, req("probe", kv("zero", "x")))
	if got := showAll(resp); got != "OK | OVER_LIMIT 0/MINUTE reset=56s" {
		t.Fatalf("got %s", got)
	}
	if got := f.stats.CounterValue("ratelimit.service.global_shadow_mode"); got != 2 {
		t.Fatalf("global_shadow_mode = %d", got)
	}
}

func TestGlobalQuotaMode(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(o *engine.Options) { o.QuotaMode = true }, "probe.yaml")
	// With every descriptor a quota, one over and one not is still OK overall.
	f.do(t, req("probe", kv("k", "two")))
	f.do(t, req("probe", kv("k", "two")))
	if got := showAll(f.do(t, req("probe", kv("k", "two"), kv("near", "q")))); got != "OK | OVER_LIMIT 2/MINUTE reset=56s | OK 10/MINUTE rem=9 reset=56s" {
		t.Fatalf("got %s", got)
	}
	if got := showAll(f.do(t, req("probe", kv("k", "two"), kv("zero", "q")))); !strings.HasPrefix(got, "OVER_LIMIT") {
		t.Fatalf("all quotas over must be OVER_LIMIT: %s", got)
	}
}

func TestResponseHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(o *engine.Options) { o.Headers.Enabled = true }, "probe.yaml", "rl.yaml")
	hdr := func(r *engine.Response) string {
		var s []string
		for _, h := range r.Headers {
			s = append(s, h.Key+"="+h.Value)
		}
		return strings.Join(s, ",")
	}
	// Smallest remaining wins: two (1 left) over hour5 (4 left).
	if got := hdr(f.do(t, req("probe", kv("k", "hour5"), kv("k", "two")))); got != "RateLimit-Limit=2,RateLimit-Remaining=1,RateLimit-Reset=56" {
		t.Errorf("got %s", got)
	}
	// Unlimited only: no headers.
	if got := hdr(f.do(t, req("probe", kv("free", "x")))); got != "" {
		t.Errorf("unlimited: %s", got)
	}
	// An over-limit descriptor forces the selection even if listed first.
	if got := hdr(f.do(t, req("probe", kv("zero", "x"), kv("k", "hour5")))); got != "RateLimit-Limit=0,RateLimit-Remaining=0,RateLimit-Reset=56" {
		t.Errorf("over: %s", got)
	}
	// Ties: the first wins.
	if got := hdr(f.do(t, req("probe", kv("near", "t1"), kv("near", "t2")))); got != "RateLimit-Limit=10,RateLimit-Remaining=9,RateLimit-Reset=56" {
		t.Errorf("tie: %s", got)
	}
}

func TestDynamicMetadata(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(o *engine.Options) { o.DynamicMetadata = true }, "probe.yaml", "rl.yaml")
	r := req("rl", kv("service", "service_1"), kv("service", "service_2"))
	first := f.do(t, r).DynamicMetadata
	want := map[string]any{
		"domain": "rl",
		"descriptors": []any{
			map[string]any{"entries": []any{"service=service_1"}},
			map[string]any{"entries": []any{"service=service_2"}},
		},
		"metadata": map[string]any{"service_with_quota": map[string]any{"name": "service_1"}},
	}
	if !reflect.DeepEqual(first, want) {
		t.Fatalf("first:\n got %#v\nwant %#v", first, want)
	}
	second := f.do(t, r).DynamicMetadata
	if got := second["metadata"]; !reflect.DeepEqual(got, map[string]any{"service_with_quota": map[string]any{"name": "service_2"}}) {
		t.Fatalf("second metadata %#v", got)
	}
	if third := f.do(t, r).DynamicMetadata; third["metadata"] != nil {
		t.Fatalf("third has metadata %#v", third["metadata"])
	}
	// Empty values still render as "key=", and overrides and hits appear.
	r2 := req("probe", kv("free", ""))
	r2.HitsAddend = 2
	r2.Descriptors = append(r2.Descriptors, engine.Descriptor{Entries: kv("zzz", "o"), HitsAddend: u64(3),
		Limit: &engine.LimitOverride{RequestsPerUnit: 7, Unit: engine.UnitHour}})
	md := f.do(t, r2).DynamicMetadata
	descs := md["descriptors"].([]any)
	if got := descs[0].(map[string]any)["entries"]; !reflect.DeepEqual(got, []any{"free="}) {
		t.Errorf("entries %v", got)
	}
	if d := descs[1].(map[string]any); d["limit"] != "requests_per_unit:7 unit:HOUR" || d["hitsAddend"] != float64(3) || md["hitsAddend"] != float64(2) {
		t.Errorf("descriptor %v, request hits %v", d, md["hitsAddend"])
	}
}

func TestUnlimitedTouchesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "probe.yaml")
	r := f.do(t, req("probe", kv("free", "x")))
	if r.Statuses[0].LimitRemaining != math.MaxUint32 || f.counter.calls != 0 {
		t.Fatalf("remaining %d, backend calls %d", r.Statuses[0].LimitRemaining, f.counter.calls)
	}
	var names []string
	f.stats.Each(func(v stats.Value) {
		if strings.Contains(v.Name, ".free") && v.Counter != nil && v.Counter.Value() > 0 {
			names = append(names, v.Name)
		}
	})
	if len(names) > 0 {
		t.Fatalf("unlimited rule counted stats: %v", names)
	}
}

func TestStopIncrementWhenOverLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(o *engine.Options) { o.StopIncrementOnLimit = true }, "probe.yaml")
	// k_two gets to its limit; then a request with k_two and near: k_two is over,
	// so near must not be counted.
	f.do(t, req("probe", kv("k", "two")))
	f.do(t, req("probe", kv("k", "two")))
	calls := f.counter.calls
	resp := f.do(t, req("probe", kv("k", "two"), kv("near", "s")))
	// As the reference: near was sent with 0 hits, so it reports what it
	// holds (0), not what it would have held.
	if got := showAll(resp); got != "OVER_LIMIT | OVER_LIMIT 2/MINUTE reset=56s | OK 10/MINUTE rem=10 reset=56s" {
		t.Fatalf("got %s", got)
	}
	// One read of both (OpGet), then k_two incremented and near sent with 0.
	if f.counter.calls != calls+2 {
		t.Fatalf("%d counter calls, want 2", f.counter.calls-calls)
	}
	reads, incs := f.counter.ops[calls], f.counter.ops[calls+1]
	if len(reads) != 2 || reads[0].Kind != engine.OpGet || reads[1].Kind != engine.OpGet {
		t.Fatalf("first call %+v: want two reads", reads)
	}
	if len(incs) != 2 || incs[0].Kind != engine.OpAdd || incs[0].Hits != 1 || incs[1].Hits != 0 {
		t.Fatalf("second call %+v: want k_two +1, near +0", incs)
	}
	// near was only read: a fresh request sees it untouched.
	if got := showAll(f.do(t, req("probe", kv("near", "s")))); got != "OK | OK 10/MINUTE rem=9 reset=56s" {
		t.Fatalf("near was incremented: %s", got)
	}
	// Stats still count the full hits (issue #808).
	if got := f.stats.CounterValue("ratelimit.service.rate_limit.probe.near.total_hits"); got != 2 {
		t.Fatalf("near total_hits %d", got)
	}
}

func TestContextDeadlineBoundsTheWait(t *testing.T) {
	t.Parallel()
	blocked := make(chan struct{})
	defer close(blocked)
	o := engine.DefaultOptions()
	o.Timeout = 20 * time.Millisecond
	o.Counter = counterFunc(func(ctx context.Context, _ []engine.CounterOp) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-blocked:
			return nil
		}
	})
	svc, err := engine.NewService(o)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := svc.LoadConfig([]engine.ConfigFile{{Name: "p", YAML: []byte("domain: d\ndescriptors:\n- {key: a, rate_limit: {unit: second, requests_per_unit: 1}}\n")}}, false)
	if err != nil {
		t.Fatal(err)
	}
	svc.SetConfig(cfg)
	_, err = svc.ShouldRateLimit(context.Background(), req("d", kv("a", "1")))
	if !errors.Is(err, engine.ErrBackend) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
}

type counterFunc func(context.Context, []engine.CounterOp) error

func (f counterFunc) Apply(ctx context.Context, ops []engine.CounterOp, _ engine.Batch) error {
	return f(ctx, ops)
}

// deadlineCounter records whether the engine gave its calls a deadline.
type deadlineCounter struct {
	backendCounter
	bound       time.Duration
	hadDeadline bool
}

func (c *deadlineCounter) WaitBound() time.Duration { return c.bound }
func (c *deadlineCounter) Apply(ctx context.Context, ops []engine.CounterOp, batch engine.Batch) error {
	_, c.hadDeadline = ctx.Deadline()
	return c.backendCounter.Apply(ctx, ops, batch)
}

// TestDeadlineOnlyWhenTheCounterDoesNotBoundItsWait: a counter that answers
// within the engine's timeout by itself (the actors Router) gets no deadline
// (no timer per decision); one that might wait longer does.
func TestDeadlineOnlyWhenTheCounterDoesNotBoundItsWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		bound        time.Duration
		wantDeadline bool
	}{
		{time.Second, false},
		{500 * time.Millisecond, false},
		{2 * time.Second, true},
	} {
		var dc *deadlineCounter
		f := newFixture(t, func(o *engine.Options) {
			dc = &deadlineCounter{backendCounter: backendCounter{b: newMemory(testenv.NewClock(t0))}, bound: tc.bound}
			o.Counter = dc
			o.Timeout = time.Second
		}, "probe.yaml")
		f.do(t, req("probe", kv("k", "two")))
		if dc.calls != 1 || dc.hadDeadline != tc.wantDeadline {
			t.Errorf("bound %v: %d calls, deadline %v, want %v", tc.bound, dc.calls, dc.hadDeadline, tc.wantDeadline)
		}
	}
}
