package alloc

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestAddNeedOneSeg checks addNeed's path for a single Seg against its
// general path, which a Seg that reaches no window leaves unchanged.
func TestAddNeedOneSeg(t *testing.T) {
	const w = int64(time.Second)
	rng := rand.New(rand.NewPCG(1, 2))
	p := &Planner{in: &Input{Window: w}}
	for it := range 2000 {
		p.base = 1_700_000_000 * w
		from := p.base + rng.Int64N(6*w) - 2*w
		sg := Seg{From: from, Until: from + 1 + rng.Int64N(9*w), Rate: rng.Float64() * 500, Burst: float64(rng.IntN(20))}
		far := Seg{From: p.base + 100*w, Until: p.base + 101*w, Rate: 1, Burst: 1}
		one, two := make([]float64, 12), make([]float64, 12)
		p.addNeed(one, []Seg{sg})
		p.addNeed(two, []Seg{sg, far})
		for k := range one {
			if math.Abs(one[k]-two[k]) > 1e-6 {
				t.Fatalf("iteration %d window %d: one Seg %+v needs %v, the general path %v", it, k, sg, one[k], two[k])
			}
		}
	}
}

// addNeedByWindow is addNeed as first written, window by window: the
// oracle the faster sweep is checked against.
func (p *Planner) addNeedByWindow(need []float64, segs []Seg) {
	if len(segs) == 0 {
		return
	}
	w := p.in.Window
	for k := range need {
		ks, ke := p.base+int64(k)*w, p.base+int64(k+1)*w
		burst := 0.0
		var cuts []int64
		for _, sg := range segs {
			if a, b := max(ks, sg.From), min(ke, sg.Until); b > a {
				burst += sg.Burst
				cuts = append(cuts, a, b)
			}
		}
		if len(cuts) == 0 {
			continue
		}
		slices.Sort(cuts)
		spent := burst
		for i := 1; i < len(cuts); i++ {
			a, b := cuts[i-1], cuts[i]
			if b <= a {
				continue
			}
			rate := 0.0
			for _, sg := range segs {
				if sg.From <= a && sg.Until >= b {
					rate = max(rate, sg.Rate)
				}
			}
			spent += rate * float64(b-a) / 1e9
		}
		need[k] += spent
	}
}

// TestAddNeedSweep checks addNeed against the window-by-window oracle on
// random overlapping Segs, before, across and after the windows.
func TestAddNeedSweep(t *testing.T) {
	const w = int64(time.Second)
	rng := rand.New(rand.NewPCG(3, 4))
	p := &Planner{in: &Input{Window: w}}
	for it := range 5000 {
		p.base = 1_700_000_000 * w
		segs := make([]Seg, 1+rng.IntN(5))
		for i := range segs {
			from := p.base + rng.Int64N(14*w) - 3*w
			segs[i] = Seg{From: from, Until: from + 1 + rng.Int64N(9*w), Rate: rng.Float64() * 500, Burst: float64(rng.IntN(20))}
		}
		n := 1 + rng.IntN(12)
		got, want := make([]float64, n), make([]float64, n)
		p.addNeed(got, segs)
		p.addNeedByWindow(want, segs)
		for k := range got {
			if math.Abs(got[k]-want[k]) > 1e-6 {
				t.Fatalf("iteration %d window %d of %d: Segs %+v need %v, the oracle %v", it, k, n, segs, got[k], want[k])
			}
		}
	}
}

// TestLegacyBucketCounted: a bucket sent to a client that may refill on a
// renewal (the per-worker client, whose TokenBucketImpl may admit a token
// more than max_tokens once: LegacyCredit) is counted that token more in
// every window it reaches; the newest client's is counted as sent. A
// renewal of the legacy client's bucket is a new bucket, counted again.
func TestLegacyBucketCounted(t *testing.T) {
	const sec = int64(time.Second)
	o := DefaultOptions()
	s := Strategy{Kind: TokenBucket, MaxTokens: 4, TokensPerFill: 10, FillInterval: time.Second}
	for _, c := range []struct {
		refill bool
		burst  float64
	}{{false, 4}, {true, 4 + LegacyCredit}} {
		r := Reporter{Live: true, Refill: c.refill}
		Commit(&r, Change{Strat: s, TTL: 5 * time.Second, Replace: true}, 10*sec, o)
		if len(r.Segs) != 1 || r.Segs[0].Burst != c.burst {
			t.Fatalf("refill %v: segs %+v, want one of burst %v", c.refill, r.Segs, c.burst)
		}
		p := &Planner{O: o, in: &Input{Now: 10 * sec, Window: sec}, base: 10 * sec}
		need := make([]float64, 3)
		p.addNeed(need, r.Segs)
		if need[1] != c.burst+10 {
			t.Errorf("refill %v: need in a whole window %v, want %v (its bucket and a second of its rate)", c.refill, need[1], c.burst+10)
		}
		Commit(&r, Change{Strat: s, TTL: 5 * time.Second}, 11*sec, o) // an equal renewal
		if want := map[bool]int{false: 1, true: 2}[c.refill]; len(r.Segs) != want {
			t.Errorf("refill %v: after an equal renewal %d segs, want %d", c.refill, len(r.Segs), want)
		}
	}
}
