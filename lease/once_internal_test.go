package lease

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// onceFalseSeen marks n new keys (random hashes) in o, then reports the
// share of another 10,000 new keys that o takes for keys seen before.
func onceFalseSeen(o *onceSet, r *rand.Rand, n int) float64 {
	for range n {
		o.seen(r.Uint64())
	}
	seen := 0
	for range 10_000 {
		if o.seen(r.Uint64()) {
			seen++
		}
	}
	return float64(seen) / 10_000
}

// TestOnceSetKeepsUpWithABurst: within one generation (no rotation), a
// burst of new keys is not mostly taken for keys seen before, which would
// make each a state. A set of a fixed 2¹⁹ bits took 45 % of new keys for
// seen ones after 300,000 and 85 % after 1,000,000.
func TestOnceSetKeepsUpWithABurst(t *testing.T) {
	for _, tc := range []struct {
		keys    int
		maxSeen float64
	}{
		{1_000, 0.02},
		{10_000, 0.04},
		{300_000, 0.12},
		{1_000_000, 0.12},
		{1_500_000, 0.25}, // past what the largest generation (2²⁴ bits) is sized for
	} {
		var o onceSet
		o.init()
		got := onceFalseSeen(&o, rand.New(rand.NewPCG(uint64(tc.keys), 1)), tc.keys)
		if got > tc.maxSeen {
			t.Errorf("after %d new keys, %.3f of the next new keys taken as seen, want ≤ %.2f (generation of %d words)",
				tc.keys, got, tc.maxSeen, len(o.gen[o.cur.Load()&1].Load().words))
		}
	}
}

// TestOnceSetRemembers: a key marked is found in the same generation, and
// in the next (after a growth, or a rotation), and forgotten after the
// generation after that.
func TestOnceSetRemembers(t *testing.T) {
	at := coldIdle.Microseconds()
	for _, tc := range []struct {
		name string
		next func(t *testing.T, o *onceSet, r *rand.Rand)
	}{
		{"growth", func(t *testing.T, o *onceSet, r *rand.Rand) {
			before := o.gen[o.cur.Load()&1].Load()
			onceFalseSeen(o, r, 40_000)
			if o.gen[o.cur.Load()&1].Load() == before {
				t.Fatal("40,000 keys in the least generation did not make it grow")
			}
		}},
		{"rotation", func(_ *testing.T, o *onceSet, _ *rand.Rand) { o.rotate(at) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o onceSet
			o.init()
			r := rand.New(rand.NewPCG(7, 7))
			keys := make([]uint64, 100)
			for i := range keys {
				keys[i] = r.Uint64()
				if o.seen(keys[i]) {
					t.Fatalf("key %d seen before it was marked", i)
				}
			}
			tc.next(t, &o, r)
			for i, k := range keys {
				if !o.has(k) {
					t.Fatalf("key %d forgotten in the next generation", i)
				}
			}
			o.rotate(2 * at)
			forgotten := 0
			for _, k := range keys {
				if !o.has(k) {
					forgotten++
				}
			}
			if forgotten < 95 {
				t.Fatalf("%d of 100 keys forgotten two generations later, want ≥ 95", forgotten)
			}
		})
	}
}

// has reports whether h is marked, without marking it.
func (o *onceSet) has(h uint64) bool {
	cur := o.cur.Load() & 1
	return o.gen[cur^1].Load().has(h) || o.gen[cur].Load().has(h)
}

// TestOnceSetShrinks: a rotation sizes the next generation for the keys
// of the last: after a burst, a quiet second brings it back to the least.
func TestOnceSetShrinks(t *testing.T) {
	var o onceSet
	o.init()
	r := rand.New(rand.NewPCG(3, 3))
	onceFalseSeen(&o, r, 500_000)
	at := coldIdle.Microseconds()
	o.rotate(at)
	if n := len(o.gen[o.cur.Load()&1].Load().words); n < 500_000*onceBitsPerKey/64 {
		t.Fatalf("after 500,000 keys the next generation has %d words, want ≥ %d", n, 500_000*onceBitsPerKey/64)
	}
	o.rotate(2 * at) // the burst's generation is the older now, and no key came
	o.rotate(3 * at)
	for i := range o.gen {
		if n := len(o.gen[i].Load().words); n != onceMinWords {
			t.Fatalf("generation %d has %d words after two quiet rotations, want %d", i, n, onceMinWords)
		}
	}
}

// TestOnceSetConcurrent: marking from several goroutines while the set
// grows and rotates (run with -race).
func TestOnceSetConcurrent(t *testing.T) {
	var o onceSet
	o.init()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for range 100_000 {
				o.seen(r.Uint64())
			}
		})
	}
	wg.Go(func() {
		for i := range 50 {
			o.rotate(int64(i+1) * coldIdle.Microseconds())
			time.Sleep(100 * time.Microsecond)
		}
	})
	wg.Wait()
}
