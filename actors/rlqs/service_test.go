package rlqs_test

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/actors/rlqs"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
	alloc "github.com/sluicehq/sluice/engine/rlqs"
	"github.com/sluicehq/sluice/engine/stats"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const rules = `domain: q
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: user
    value: free
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: user
    value: vip
    rate_limit: {unlimited: true}
  - key: user
    value: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 10}
`

// replica is one sluice's engine and quota service on a shared store.
type replica struct {
	eng   *engine.Service
	quota *rlqs.Service
	stats *stats.Store
}

func newReplica(t testing.TB, store engine.Backend, yaml string, o rlqs.Options) *replica {
	t.Helper()
	return newReplicaWith(t, store, yaml, o, rlqs.New)
}

// newReplicaWith is newReplica with the quota service made by start.
func newReplicaWith(t testing.TB, store engine.Backend, yaml string, o rlqs.Options,
	start func(rlqs.Options, rlqs.Rules, engine.Counter, *stats.Store) (*rlqs.Service, error)) *replica {
	t.Helper()
	st := stats.NewStore()
	cfg, err := engine.LoadConfig([]engine.ConfigFile{{Name: "rules.yaml", YAML: []byte(yaml)}}, engine.ConfigOptions{Stats: st})
	if err != nil {
		t.Fatal(err)
	}
	eo := engine.DefaultOptions()
	eo.Counter = engine.DirectCounter{Backend: store}
	eo.Stats = st
	eng, err := engine.NewService(eo)
	if err != nil {
		t.Fatal(err)
	}
	eng.SetConfig(cfg)
	q, err := start(o, eng, eo.Counter, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	return &replica{eng: eng, quota: q, stats: st}
}

// sink records what a stream is sent, with when.
type sink struct {
	mu   sync.Mutex
	got  []sent
	more chan struct{}
}

type sent struct {
	at time.Time
	a  rlqs.Action
}

func newSink() *sink { return &sink{more: make(chan struct{}, 1)} }

func (s *sink) Push(acts []rlqs.Action) {
	now := time.Now()
	s.mu.Lock()
	for _, a := range acts {
		s.got = append(s.got, sent{now, a})
	}
	s.mu.Unlock()
	select {
	case s.more <- struct{}{}:
	default:
	}
}

func (s *sink) all() []sent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sent(nil), s.got...)
}

// wait returns the first action for user that satisfies ok.
func (s *sink) wait(t *testing.T, user string, ok func(rlqs.Action) bool) rlqs.Action {
	t.Helper()
	return waitFor(t, s, func(a rlqs.Action) bool { return a.Bucket["user"] == user && ok(a) })
}

func any(rlqs.Action) bool { return true }

func bucket(user string) map[string]string { return map[string]string{"user": user} }

func report(t *testing.T, st *rlqs.Stream, users []string, elapsed time.Duration, allowed, denied uint64) {
	t.Helper()
	us := make([]rlqs.Usage, len(users))
	for i, u := range users {
		us[i] = rlqs.Usage{Bucket: bucket(u), Elapsed: elapsed, Allowed: allowed, Denied: denied}
	}
	if err := st.Report(time.Now(), "q", us); err != nil {
		t.Fatal(err)
	}
}

// TestPlans: what each kind of rule assigns, and that the reports count in
// the rule's statistics as RLS decisions do.
func TestPlans(t *testing.T) {
	store := memory.New(nil)
	r := newReplica(t, store, rules, rlqs.DefaultOptions())
	snk := newSink()
	st := r.quota.Open(snk)
	defer st.Close()
	report(t, st, []string{"ann", "free", "vip", "shadow"}, 0, 1, 0)
	if err := st.Report(time.Now(), "q", []rlqs.Usage{{Bucket: map[string]string{"path": "/x"}}}); err != nil {
		t.Fatal(err)
	}
	tb := snk.wait(t, "ann", any)
	if tb.Strategy.Kind != alloc.TokenBucket || tb.Strategy.TokensPerFill == 0 ||
		float64(tb.Strategy.TokensPerFill)+float64(tb.Strategy.MaxTokens) > 1000 || tb.TTL != time.Second {
		t.Errorf("ann: %+v, want a token bucket within 1000/s, TTL 1s (the demand is not known yet)", tb)
	}
	for user, want := range map[string]alloc.Kind{"free": alloc.DenyAll, "vip": alloc.AllowAll, "shadow": alloc.AllowAll} {
		if got := snk.wait(t, user, any); got.Strategy.Kind != want || got.Abandon {
			t.Errorf("%s: %+v, want %v", user, got, want)
		}
	}
	report(t, st, []string{"ann"}, time.Second, 7, 3)
	p := "ratelimit.service.rate_limit.q.user."
	for name, want := range map[string]uint64{"total_hits": 11, "within_limit": 8, "over_limit": 3} {
		if got := r.stats.CounterValue(p + name); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	for _, x := range snk.all() {
		if x.a.Bucket["path"] != "" {
			t.Errorf("a bucket matching no rule was sent %+v (no_match none)", x.a)
		}
	}
}

// TestBadReports: a report that cannot be taken is refused whole, with an
// error naming what is wrong.
func TestBadReports(t *testing.T) {
	r := newReplica(t, memory.New(nil), rules, rlqs.DefaultOptions())
	for _, tc := range []struct {
		name   string
		domain string
		us     []rlqs.Usage
		want   string
	}{
		{"no domain", "", []rlqs.Usage{{Bucket: bucket("a")}}, "must name its domain"},
		{"empty bucket", "q", []rlqs.Usage{{Bucket: map[string]string{}}}, "bucket_id has no entries"},
		{"empty key", "q", []rlqs.Usage{{Bucket: map[string]string{"": "x"}}}, "empty key or value"},
		{"empty value", "q", []rlqs.Usage{{Bucket: map[string]string{"user": ""}}}, "empty key or value"},
		{"negative elapsed", "q", []rlqs.Usage{{Bucket: bucket("a"), Elapsed: -time.Second}}, "negative time_elapsed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := r.quota.Open(newSink())
			defer st.Close()
			err := st.Report(time.Now(), tc.domain, tc.us)
			if err == nil || !contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
	st := r.quota.Open(newSink())
	defer st.Close()
	report(t, st, []string{"a"}, 0, 1, 0)
	if err := st.Report(time.Now(), "other", []rlqs.Usage{{Bucket: bucket("a")}}); err == nil || !contains(err.Error(), `domain "other" on a stream of domain "q"`) {
		t.Fatalf("domain change: %v", err)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// FuzzReport: any usage report is taken or refused with an error; nothing
// crashes, and a refused one changes nothing.
func FuzzReport(f *testing.F) {
	f.Add("q", "user", "ann", int64(0), uint64(1), uint64(0))
	f.Add("", "user", "ann", int64(time.Second), uint64(5), uint64(7))
	f.Add("q", "", "x", int64(-1), uint64(0), uint64(0))
	f.Add("q", "user", "", int64(1<<62), uint64(1<<63), uint64(1<<63))
	r := newReplica(f, memory.New(nil), rules, rlqs.DefaultOptions())
	f.Fuzz(func(t *testing.T, domain, key, value string, elapsed int64, allowed, denied uint64) {
		st := r.quota.Open(newSink())
		defer st.Close()
		err := st.Report(time.Now(), domain, []rlqs.Usage{{Bucket: map[string]string{key: value},
			Elapsed: time.Duration(elapsed), Allowed: allowed, Denied: denied}})
		if err == nil && (domain == "" || key == "" || value == "" || elapsed < 0) {
			t.Fatalf("took a report that should be refused: %q %q=%q %d", domain, key, value, elapsed)
		}
	})
}
