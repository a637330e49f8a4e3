package lease_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/lease"
)

// boundedDirect is a DirectCounter that bounds its calls itself, as the
// Router the server runs does (no context per call in the lease layer).
type boundedDirect struct{ engine.DirectCounter }

func (boundedDirect) WaitBound() time.Duration { return time.Second }

// BenchmarkColdKey is one decision on a key never seen, through the lease
// layer and straight to the store (exact mode), on the memory backend: the
// lease layer's own cost of a cold key's first decision.
func BenchmarkColdKey(b *testing.B) {
	for _, mode := range []string{"exact", "lease"} {
		b.Run(mode, func(b *testing.B) {
			var c engine.Counter = boundedDirect{engine.DirectCounter{Backend: memory.New(time.Now)}}
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
				ops[0] = engine.Add("cold_"+strconv.Itoa(i), 1, time.Minute)
				if mode == "lease" {
					ops[0].Lease = engine.LeaseTerms{Kind: engine.LeaseWindow, Limit: 1000, UnitSec: 60, At: now.UnixMicro()}
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

// heldBackend holds the first call after hold is set until release is
// closed; held is closed when that call arrives.
type heldBackend struct {
	engine.Backend
	hold          atomic.Bool
	held, release chan struct{}
}

func (b *heldBackend) Exec(ctx context.Context, ops []engine.CounterOp) error {
	if b.hold.CompareAndSwap(true, false) {
		close(b.held)
		select {
		case <-b.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return b.Backend.Exec(ctx, ops)
}

// TestNoDecisionWaitsTwoRoundTrips (issue 40, window ends): a decision
// that arrives while its key's reservation is in flight with no room left
// for it does not wait for that reservation and then for another (two
// round trips, the window-end p99 at twice exact mode's): it sends a
// reservation of its own hits and is answered from it, as exact counting
// answers from its INCRBY, while the reservation in flight is still held
// at the store.
func TestNoDecisionWaitsTwoRoundTrips(t *testing.T) {
	clk := testenv.NewClock(time.Unix(1795313400+1, 0))
	b := &heldBackend{Backend: memory.New(clk.Now), held: make(chan struct{}), release: make(chan struct{})}
	cfg, err := engine.LoadConfig([]engine.ConfigFile{{Name: "rules.yaml", YAML: []byte(edgeRules)}}, engine.ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lc, err := lease.New(engine.DirectCounter{Backend: b}, lease.Options{Clock: clk.Now, CallTimeout: callTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	o := engine.DefaultOptions()
	o.Clock, o.Counter, o.Counting, o.Timeout = clk.Now, lc, engine.CountLease, callTimeout
	svc, err := engine.NewService(o)
	if err != nil {
		t.Fatal(err)
	}
	svc.SetConfig(cfg)
	if decide(t, svc, "big") != engine.CodeOK { // the key's first decision
		t.Fatal("refused far below the limit")
	}
	async := func() chan engine.Code {
		out := make(chan engine.Code, 1)
		go func() {
			resp, err := svc.ShouldRateLimit(context.Background(), request("big"))
			if err != nil {
				t.Error(err)
				out <- engine.CodeUnknown
				return
			}
			out <- resp.OverallCode
		}()
		return out
	}
	b.hold.Store(true)
	first := async() // reserves; held at the store
	<-b.held
	second := async()
	var answered bool
	testenv.Eventually(t, "the second decision to be answered or to wait", func() bool {
		select {
		case code := <-second:
			if code != engine.CodeOK {
				t.Errorf("second decision: %v", code)
			}
			answered = true
			return true
		default:
			return lc.Waiting() > 1
		}
	})
	close(b.release)
	if got := <-first; got != engine.CodeOK {
		t.Errorf("first decision: %v", got)
	}
	if !answered {
		<-second
		t.Fatal("a decision waited for the reservation in flight (no room for it), then for the next: two round trips")
	}
}

// TestColdDecisionBesideExactOneCall: a request whose descriptors count
// one by lease (a cold key) and one exactly costs one store call, as in
// exact mode: the cold key's reservation of its hits goes in the exact
// operations' call (it used to follow that call with its own: two round
// trips).
func TestColdDecisionBesideExactOneCall(t *testing.T) {
	clk := testenv.NewClock(time.Unix(1795313400+1, 0))
	s := newEdgeStore(clk, time.Millisecond, edgeUnits)
	rules := edgeRules + "  - key: e\n    rate_limit: {unit: minute, requests_per_unit: 10, counting: exact}\n"
	svc, stop, _ := edgeReplicaStats(t, s, clk, rules, "lease")
	req := &engine.Request{Domain: "d", Descriptors: []engine.Descriptor{
		{Entries: []engine.Entry{{Key: "c", Value: "new"}}}, {Entries: []engine.Entry{{Key: "e", Value: "x"}}}}}
	resp, err := svc.ShouldRateLimit(context.Background(), req)
	if err != nil || resp.OverallCode != engine.CodeOK {
		t.Fatalf("%v %v", resp, err)
	}
	stop()
	if calls, writes, _ := s.counts(); calls != 1 || writes != 2 {
		t.Fatalf("%d store calls, %d writes; want 1 call with 2 writes, as in exact mode", calls, writes)
	}
}
