package alloc_test

import (
	"testing"

	"github.com/sluicehq/sluice/engine/alloc"
)

// TestNewEnvoyAnsweredAtOnce: a hub whose Envoys ask less than the limit
// holds room for one more Envoy's first share, so a new Envoy is answered
// by the plan its subscription makes rather than after a store call (and
// a second plan); a hub whose limit is taken holds none.
func TestNewEnvoyAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		envoys int
		demand float64
		want   bool
	}{{10, 0.3, true}, {49, 0.5, true}, {10, 2, false}} {
		snaps := hubRun(c.envoys, c.demand)
		in := snaps[len(snaps)-1]
		in.Reporters = append(in.Reporters, alloc.Reporter{Live: true, Claim: alloc.Rate(1, 0, 0, 0)})
		p := alloc.Planner{O: serviceOptions()}
		var out alloc.Output
		p.Decide(&in, &out)
		got := false
		for _, ch := range out.Changes {
			if ch.R == len(in.Reporters)-1 && ch.Strat.Kind == alloc.TokenBucket {
				got = true
			}
		}
		if got != c.want {
			t.Errorf("%d Envoys asking %v of the limit: a new Envoy answered with a token bucket at once = %v, want %v (reserve %v)", c.envoys, c.demand, got, c.want, out.Reserve)
		}
	}
}
