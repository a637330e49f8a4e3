package engine_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
)

func TestCountingConfig(t *testing.T) {
	t.Parallel()
	bad := []struct{ rateLimit, want string }{
		{"{unit: second, requests_per_unit: 1, counting: leased}", "invalid rate limit counting 'leased' (want exact or lease)"},
		{"{unlimited: true, counting: lease}", "should not specify rate limit counting when unlimited"},
	}
	for _, tc := range bad {
		_, err := engine.LoadConfig([]engine.ConfigFile{{Name: "f.yaml", YAML: []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: " + tc.rateLimit + "\n")}}, engine.ConfigOptions{})
		if err == nil || err.Error() != "f.yaml: "+tc.want {
			t.Errorf("%s: error %v, want %q", tc.rateLimit, err, tc.want)
		}
	}
	cfg, err := engine.LoadConfig([]engine.ConfigFile{{Name: "f.yaml", YAML: []byte(`domain: d
descriptors:
  - {key: a, rate_limit: {unit: second, requests_per_unit: 1, counting: lease}}
  - {key: b, rate_limit: {unit: minute, requests_per_unit: 2, counting: exact, algorithm: sliding_window}}
  - {key: c, rate_limit: {unit: hour, requests_per_unit: 3}}
`)}}, engine.ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := `d.a: unit=SECOND requests_per_unit=1, shadow_mode: false, quota_mode: false, counting: lease
d.b: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false, algorithm: sliding_window, counting: exact
d.c: unit=HOUR requests_per_unit=3, shadow_mode: false, quota_mode: false
`
	if got := cfg.Dump(); got != want {
		t.Fatalf("dump:\n%s\nwant:\n%s", got, want)
	}
}

// recordingCounter keeps the operations the engine hands to its Counter.
type recordingCounter struct {
	b   engine.Backend
	ops []engine.CounterOp
}

func (c *recordingCounter) Apply(ctx context.Context, ops []engine.CounterOp, batch engine.Batch) error {
	c.ops = append(c.ops, ops...)
	return engine.DirectCounter{Backend: c.b}.Apply(ctx, ops, batch)
}

// TestLeaseTerms: which operations the engine marks as leased, with what
// terms, under the service default and each rule's own counting.
func TestLeaseTerms(t *testing.T) {
	t.Parallel()
	rules := `domain: d
descriptors:
  - {key: fw, rate_limit: {unit: minute, requests_per_unit: 10}}
  - {key: sw, rate_limit: {unit: minute, requests_per_unit: 20, algorithm: sliding_window}}
  - {key: tb, rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 7}}
  - {key: ex, rate_limit: {unit: minute, requests_per_unit: 10, counting: exact}}
  - {key: le, rate_limit: {unit: hour, requests_per_unit: 30, counting: lease}}
`
	cfg, err := engine.LoadConfig([]engine.ConfigFile{{Name: "f.yaml", YAML: []byte(rules)}}, engine.ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type term struct {
		kind  engine.LeaseKind
		limit uint32
		unit  int32
	}
	tests := []struct {
		name     string
		def      engine.Counting
		stopIncr bool
		key      string
		want     []term
	}{
		{"default exact", engine.CountExact, false, "fw", []term{{}}},
		{"fixed", engine.CountLease, false, "fw", []term{{engine.LeaseWindow, 10, 60}}},
		{"sliding", engine.CountLease, false, "sw", []term{{engine.LeaseSliding, 20, 60}, {engine.LeaseSlidingPrev, 0, 0}}},
		{"bucket", engine.CountLease, false, "tb", []term{{engine.LeaseBucket, 7, 1}}},
		{"rule exact", engine.CountLease, false, "ex", []term{{}}},
		{"rule lease", engine.CountExact, false, "le", []term{{engine.LeaseWindow, 30, 3600}}},
		{"stop increment counts exactly", engine.CountLease, true, "fw", []term{{}, {}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rc := &recordingCounter{b: memory.New(nil)}
			o := engine.DefaultOptions()
			o.Counter, o.Counting, o.StopIncrementOnLimit = rc, tc.def, tc.stopIncr
			svc, err := engine.NewService(o)
			if err != nil {
				t.Fatal(err)
			}
			svc.SetConfig(cfg)
			if _, err := svc.ShouldRateLimit(context.Background(), req("d", kv(tc.key, ""))); err != nil {
				t.Fatal(err)
			}
			if len(rc.ops) != len(tc.want) {
				t.Fatalf("%d operations, want %d", len(rc.ops), len(tc.want))
			}
			for i, w := range tc.want {
				op := rc.ops[i]
				lt := op.Lease
				got := term{lt.Kind, 0, 0}
				if lt.Kind != engine.LeaseNone && lt.Kind != engine.LeaseSlidingPrev {
					got.limit, got.unit = lt.Limit, lt.UnitSec
				}
				if got != w {
					t.Errorf("op %d (%s): %+v, want %+v", i, op.Key, got, w)
				}
				// A leased window's operation carries the decision's time,
				// inside the window its key names (the lease layer reckons
				// the window's end from it).
				if lt.Kind == engine.LeaseWindow || lt.Kind == engine.LeaseSliding {
					start := lt.At / 1e6 / int64(lt.UnitSec) * int64(lt.UnitSec)
					if lt.At <= 0 || !strings.HasSuffix(op.Key, "_"+strconv.FormatInt(start, 10)) {
						t.Errorf("op %d (%s): At %d is not in the key's window", i, op.Key, lt.At)
					}
				}
			}
		})
	}
}

// TestSlidingPairLabels: the engine links each leased sliding window's
// operation to its read of the previous window by a label no other pair
// of the call has, also when a batch of requests shares one call and two
// of them count on the same key: engine.SlidingRead finds each read after
// the call's operations are shuffled.
func TestSlidingPairLabels(t *testing.T) {
	t.Parallel()
	rules := `domain: d
descriptors:
  - {key: sw, rate_limit: {unit: minute, requests_per_unit: 20, algorithm: sliding_window}}
  - {key: sh, rate_limit: {unit: hour, requests_per_unit: 20, algorithm: sliding_window}}
  - {key: fw, rate_limit: {unit: minute, requests_per_unit: 10}}
`
	cfg, err := engine.LoadConfig([]engine.ConfigFile{{Name: "f.yaml", YAML: []byte(rules)}}, engine.ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rc := &recordingCounter{b: memory.New(nil)}
	o := engine.DefaultOptions()
	o.Counter, o.Counting = rc, engine.CountLease
	svc, err := engine.NewService(o)
	if err != nil {
		t.Fatal(err)
	}
	svc.SetConfig(cfg)
	items := []engine.BatchItem{
		{Req: req("d", kv("sw", "a"), kv("fw", ""), kv("sh", "a"))},
		{Req: req("d", kv("sw", "a"))},
		{Req: req("d", kv("fw", ""), kv("sw", "b"))},
	}
	svc.ShouldRateLimitBatch(context.Background(), nil, items)
	for i, it := range items {
		if it.Err != nil {
			t.Fatalf("request %d: %v", i, it.Err)
		}
	}
	ops := rc.ops
	// The previous window's key of each sliding operation, by its key.
	prevOf := map[string]string{}
	labels := map[uint32]bool{}
	for _, op := range ops {
		if op.Lease.Kind != engine.LeaseSliding {
			continue
		}
		if labels[op.Lease.Pair] {
			t.Errorf("%s: label %d used twice", op.Key, op.Lease.Pair)
		}
		labels[op.Lease.Pair] = true
		cut := strings.LastIndexByte(op.Key, '_')
		start, _ := strconv.ParseInt(op.Key[cut+1:], 10, 64)
		unit := int64(op.Lease.UnitSec)
		prevOf[op.Key] = op.Key[:cut+1] + strconv.FormatInt(start-unit, 10)
	}
	if len(labels) != 4 {
		t.Fatalf("%d sliding pairs, want 4: %+v", len(labels), ops)
	}
	// Reversed, each read stands before its operation, next to another
	// pair's.
	for l, r := 0, len(ops)-1; l < r; l, r = l+1, r-1 {
		ops[l], ops[r] = ops[r], ops[l]
	}
	for i := range ops {
		if ops[i].Lease.Kind != engine.LeaseSliding {
			continue
		}
		read, err := engine.SlidingRead(ops, i)
		if err != nil {
			t.Fatal(err)
		}
		if read.Key != prevOf[ops[i].Key] || read.Lease.Kind != engine.LeaseSlidingPrev {
			t.Errorf("%s paired with %s (%v), want %s", ops[i].Key, read.Key, read.Lease.Kind, prevOf[ops[i].Key])
		}
	}
}
