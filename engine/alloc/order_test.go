package alloc_test

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine/alloc"
)

// TestDecideIgnoresInputOrder: a hub's caller builds Held and InFlight
// from maps and the other replicas' claims from the board, in whatever
// order those list them; the plan (changes, store operations, claims and
// when to plan again) is the same for every order, so a simulation with
// a fixed seed runs the same way twice. Some hubs give back several
// windows, a plan of no rule all it holds.
func TestDecideIgnoresInputOrder(t *testing.T) {
	t.Parallel()
	o := alloc.DefaultOptions()
	o.Spare, o.Headroom, o.FirstShare, o.Burst, o.Hysteresis = 0.5, 0.02, 0.5, 10*time.Millisecond, 0.02
	rng := rand.New(rand.NewPCG(3, 4))
	releases := 0
	for it := range 2000 {
		in := randomHub(rng, o, it%5 == 0)
		if it%7 == 0 {
			in.Plan = alloc.Plan{Kind: alloc.PlanNone}
		}
		if len(in.Others.Claims) > 0 {
			in.Others.Claims = append(in.Others.Claims, alloc.Claim{Rate: rng.Float64() * 300, Known: true}, alloc.Claim{Rate: 0.1 + rng.Float64(), Known: true})
		}
		var want, got alloc.Output
		(&alloc.Planner{O: o}).Decide(in, &want)
		if len(want.Release) > 1 {
			releases++
		}
		for range 4 {
			sh := *in
			sh.Held = shuffled(rng, in.Held)
			sh.InFlight = shuffled(rng, in.InFlight)
			sh.Others.Claims = shuffled(rng, in.Others.Claims)
			(&alloc.Planner{O: o}).Decide(&sh, &got)
			if !reflect.DeepEqual(norm(want), norm(got)) {
				t.Fatalf("hub %d: the plan depends on the order of its input\n%+v\n%+v", it, want, got)
			}
		}
	}
	if releases == 0 {
		t.Fatal("no hub gave back more than one window: the test checks nothing of Release's order")
	}
}

func shuffled[T any](rng *rand.Rand, s []T) []T {
	c := append([]T(nil), s...)
	rng.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] })
	return c
}

// norm makes empty and nil slices alike.
func norm(o alloc.Output) alloc.Output {
	for _, s := range []*[]alloc.Hold{&o.Reserve, &o.Release} {
		if len(*s) == 0 {
			*s = nil
		}
	}
	if len(o.Changes) == 0 {
		o.Changes = nil
	}
	if len(o.Claims) == 0 {
		o.Claims = nil
	}
	return o
}
