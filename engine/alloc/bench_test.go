package alloc_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine/alloc"
)

// hubRun evolves one hub of envoys Envoys (reporting every 5 s, spread
// over the period, demands uneven, the whole at demand·limit) under a
// store that grants reservations at once up to the limit, and returns the
// snapshots the planner was given once the division settled.
func hubRun(envoys int, demand float64) []alloc.Input {
	o := serviceOptions()
	const limit = 1000.0
	period := 5 * time.Second
	now := int64(1_700_000_000) * sec
	in := alloc.Input{Plan: alloc.Plan{Kind: alloc.PlanDivide, Limit: limit}, Window: sec}
	held := map[int64]uint64{}
	var p alloc.Planner
	p.O = o
	var out alloc.Output
	var snaps []alloc.Input
	weight := 0.0
	for e := range envoys {
		weight += float64(1 + e%5)
	}
	next := now
	step := period / time.Duration(envoys)
	for k := 0; k < 4*envoys; k++ {
		e := k % envoys
		now += int64(step)
		r := &in.Reporters
		if k < envoys {
			*r = append(*r, alloc.Reporter{Live: true, Claim: alloc.Rate(1, 0, 0, 0)})
		} else {
			d := demand * limit * float64(1+e%5) / weight
			c := alloc.Rate(uint64(d*period.Seconds()), 0, period, period)
			(*r)[e].Claim = alloc.Smooth((*r)[e].Claim, c)
			(*r)[e].Period = period
			alloc.Confirm(&(*r)[e], now, o)
		}
		// Plan at the report, and at every due time before the next.
		for t := now; ; {
			in.Now = t
			in.Held = in.Held[:0]
			base := t - t%sec
			for w, n := range held {
				if w < base {
					delete(held, w)
					continue
				}
				in.Held = append(in.Held, alloc.Hold{Window: w, N: n})
			}
			for i := range in.Reporters {
				alloc.Forget(&in.Reporters[i], base)
			}
			p.Decide(&in, &out)
			if k >= 2*envoys {
				snap := in
				snap.Held = append([]alloc.Hold(nil), in.Held...)
				snap.Reporters = make([]alloc.Reporter, len(in.Reporters))
				for i, rr := range in.Reporters {
					rr.Segs = append([]alloc.Seg(nil), rr.Segs...)
					snap.Reporters[i] = rr
				}
				snaps = append(snaps, snap)
			}
			for _, c := range out.Changes {
				alloc.Commit(&in.Reporters[c.R], c, t, o)
			}
			for _, h := range out.Reserve {
				held[h.Window] = min(held[h.Window]+h.N, uint64(limit))
			}
			for _, h := range out.Release {
				held[h.Window] -= min(h.N, held[h.Window])
			}
			next = out.Next
			if next >= now+int64(step) {
				break
			}
			t = max(next, t+1)
		}
	}
	return snaps
}

// serviceOptions are the quota service's defaults (quota), which
// alloc's own (a second of burst per bucket) are not.
func serviceOptions() alloc.Options {
	o := alloc.DefaultOptions()
	o.Spare, o.Headroom, o.FirstShare, o.Burst, o.Hysteresis = 0.5, 0.02, 0.5, 10*time.Millisecond, 0.02
	return o
}

// BenchmarkDecide is the planner's cost for one plan of a hub of 50
// Envoys reporting every 5 s, as the plans of a settled hub come (at
// reports, renewals and retries), at demand half and twice the limit.
func BenchmarkDecide(b *testing.B) {
	for _, c := range []struct {
		name   string
		envoys int
		demand float64
	}{{"50 Envoys, demand 0.5", 50, 0.5}, {"50 Envoys, demand 2", 50, 2}, {"10 Envoys, demand 2", 10, 2}} {
		b.Run(c.name, func(b *testing.B) {
			snaps := hubRun(c.envoys, c.demand)
			var p alloc.Planner
			p.O = serviceOptions()
			var out alloc.Output
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				in := snaps[i%len(snaps)]
				p.Decide(&in, &out)
			}
			b.ReportMetric(float64(len(snaps))/float64(4*c.envoys-2*c.envoys), "plans/report")
		})
	}
	// A subscription: one more Envoy's first report reaches a settled hub
	// of 49 (its demand unknown, nothing held for it yet).
	b.Run("50th Envoy subscribing", func(b *testing.B) {
		snaps := hubRun(49, 2)
		in := snaps[len(snaps)-1]
		in.Reporters = append(in.Reporters, alloc.Reporter{Live: true, Claim: alloc.Rate(1, 0, 0, 0)})
		var p alloc.Planner
		p.O = serviceOptions()
		var out alloc.Output
		b.ReportAllocs()
		for b.Loop() {
			p.Decide(&in, &out)
		}
	})
}
