package alloc

import (
	"math"
	"math/rand/v2"
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
