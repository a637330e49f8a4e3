package lease_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors/lease"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
)

// BenchmarkColdKey is one decision on a key never seen, through the lease
// layer and straight to the store (exact mode), on the memory backend: the
// lease layer's own cost of a cold key's first decision.
func BenchmarkColdKey(b *testing.B) {
	for _, mode := range []string{"exact", "lease"} {
		b.Run(mode, func(b *testing.B) {
			var c engine.Counter = engine.DirectCounter{Backend: memory.New(time.Now)}
			if mode == "lease" {
				lc, err := lease.New(c, lease.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer lc.Close()
				c = lc
			}
			now := time.Now()
			ops := make([]engine.CounterOp, 1)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				ops[0] = engine.CounterOp{Key: "cold_" + strconv.Itoa(i), Hits: 1, TTL: time.Minute,
					Lease: engine.LeaseWindow, Limit: 1000, UnitSec: 60, Now: now.UnixMicro()}
				if mode == "exact" {
					ops[0].Lease = engine.LeaseNone
				}
				if err := c.Apply(context.Background(), ops, nil); err != nil || ops[0].After != 1 {
					b.Fatal(ops[0].After, err)
				}
			}
		})
	}
}

// TestStoreColdKeysNeverOver: a cold key's first decisions go to the store
// direct, each a reservation of its own hits (issue 40: as cheap as exact
// mode). Three lease replicas each send 10 decisions at once on each of
// 40 keys never seen, limited to 5 a minute: no key admits more than 5.
// The direct operation must be the lease's atomic OpReserve: memcache's
// exact-mode add reads and increments later, and three replicas that read
// the same count admit up to 15 (an attempt with OpAdd admitted 13,332 of
// a 10,000 limit in the fleet storm).
func TestStoreColdKeysNeverOver(t *testing.T) {
	const keys, each, limit = 40, 10, 5
	rules := storeRules + "  - key: n\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"
	for _, kind := range []string{"redis", "memcache"} {
		t.Run(kind, func(t *testing.T) {
			s := startStore(t, kind)
			rs := storeFleet(t, s, rules, startClock().Now, lease.Options{}, nil, "lease", "lease", "lease")
			var ok [keys]atomic.Int64
			var failed atomic.Int64
			var wg sync.WaitGroup
			for k := range keys {
				for _, r := range rs {
					for range each {
						wg.Add(1)
						go func() {
							defer wg.Done()
							req := &engine.Request{Domain: "d", Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: "n", Value: fmt.Sprintf("cold%d", k)}}}}}
							resp, err := r.svc.ShouldRateLimit(context.Background(), req)
							switch {
							case err != nil:
								failed.Add(1)
							case resp.OverallCode == engine.CodeOK:
								ok[k].Add(1)
							}
						}()
					}
				}
			}
			wg.Wait()
			if n := failed.Load(); n > 0 {
				t.Fatalf("%d decisions failed", n)
			}
			admitted, over := 0, 0
			for k := range ok {
				n := int(ok[k].Load())
				admitted += n
				if n > limit {
					over++
					t.Errorf("cold%d: %d admitted, limit %d", k, n, limit)
				}
			}
			t.Logf("%d keys × %d decisions: %d admitted (limit %d each), %d keys over", keys, each*len(rs), admitted, keys*limit, over)
			if admitted < keys {
				t.Errorf("%d admitted on %d keys: some key admitted nothing", admitted, keys)
			}
		})
	}
}
