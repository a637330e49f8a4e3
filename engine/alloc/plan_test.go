package alloc_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine/alloc"
)

const sec = int64(time.Second)

// needOf is, per window from base, the most the reporters may admit under
// their Segs: every Seg overlapping the window full, plus the fastest rate
// in force at each moment, found at the midpoint of each span between the
// Segs' ends (written apart from the planner's arithmetic).
func needOf(rs []alloc.Reporter, base, w int64, n int) []float64 {
	out := make([]float64, n)
	for _, r := range rs {
		for k := 0; k < n; k++ {
			ks, ke := base+int64(k)*w, base+int64(k+1)*w
			points := []int64{ks, ke}
			for _, sg := range r.Segs {
				if sg.From < ke && sg.Until > ks {
					out[k] += sg.Burst
					points = append(points, max(ks, sg.From), min(ke, sg.Until))
				}
			}
			slices.Sort(points)
			for i := 1; i < len(points); i++ {
				a, b := points[i-1], points[i]
				if b <= a {
					continue
				}
				mid := a + (b-a)/2
				rate := 0.0
				for _, sg := range r.Segs {
					if sg.From <= mid && mid < sg.Until {
						rate = max(rate, sg.Rate)
					}
				}
				out[k] += rate * float64(b-a) / 1e9
			}
		}
	}
	return out
}

// randomHub is a hub as a running service might hold it: reporters with
// assignments sent at various moments, some replaced and not yet
// confirmed, ghosts, and holdings that pay for what was sent (or not,
// when broken is set).
func randomHub(rng *rand.Rand, o alloc.Options, broken bool) *alloc.Input {
	now := int64(1_700_000_000)*sec + rng.Int64N(sec)
	limit := []float64{10, 100, 1000, 50_000}[rng.IntN(4)]
	in := &alloc.Input{Now: now, Plan: alloc.Plan{Kind: alloc.PlanDivide, Limit: limit}, Window: sec}
	if rng.IntN(4) == 0 {
		in.Window = 60 * sec
		in.Plan.Limit = limit / 60
	}
	nrep := 1 + rng.IntN(12)
	for range nrep {
		r := alloc.Reporter{Live: rng.IntN(5) != 0, Refill: rng.IntN(3) == 0,
			Period: []time.Duration{0, time.Second, 5 * time.Second}[rng.IntN(3)]}
		if rng.IntN(4) != 0 {
			r.Claim = alloc.Claim{Rate: rng.Float64() * limit, Known: true}
		}
		if rng.IntN(5) != 0 {
			// Sent: one to three buckets over the last few seconds.
			t := now - rng.Int64N(8*sec)
			for j := range 1 + rng.IntN(3) {
				s, _ := in.Plan.Assign(rng.Float64()*limit/float64(nrep), o)
				ttl := o.AssignTTL(r.Period)
				if j > 0 {
					for i := range r.Segs {
						if r.Segs[i].Cut == 0 {
							r.Segs[i].Cut = t
						}
					}
				}
				if sg, ok := alloc.SegOf(s, t, t+int64(o.Delivery+ttl)); ok {
					r.Segs = append(r.Segs, sg)
				}
				r.Sent, r.Cur, r.CurTTL, r.LastSend = true, s, ttl, t
				t += rng.Int64N(2 * sec)
				if t > now {
					t = now
				}
			}
			alloc.Forget(&r, now-now%in.Window)
		}
		in.Reporters = append(in.Reporters, r)
	}
	// Holdings: what the Envoys may spend, plus some; or less, broken.
	base := now - now%in.Window
	need := needOf(in.Reporters, base, in.Window, 20)
	for k, n := range need {
		h := math.Ceil(n) + float64(rng.IntN(int(limit/4)+2))
		if broken && rng.IntN(3) == 0 {
			h = math.Floor(n * rng.Float64())
		}
		if h > 0 {
			in.Held = append(in.Held, alloc.Hold{Window: base + int64(k)*in.Window, N: uint64(h)})
		}
	}
	if rng.IntN(4) == 0 {
		in.InFlight = append(in.InFlight, alloc.Hold{Window: base + in.Window, N: uint64(1 + rng.IntN(100))})
	}
	in.Full = rng.IntN(4) == 0
	if rng.IntN(3) == 0 {
		in.Others.Claims = []alloc.Claim{{Rate: rng.Float64() * limit, Known: true}, {}}
		in.Others.Overhead = rng.Float64() * limit / 10
	}
	return in
}

// TestDecideInvariants: whatever a hub holds, what it sends never lets its
// Envoys admit more in a window than it holds there (or, where they could
// already, nothing more), and every live Envoy is answered: nothing it has
// can expire before the hub plans again.
func TestDecideInvariants(t *testing.T) {
	t.Parallel()
	o := alloc.DefaultOptions()
	o.Spare, o.Headroom, o.FirstShare, o.Burst, o.Hysteresis = 0.5, 0.02, 0.5, 10*time.Millisecond, 0.02
	p := &alloc.Planner{O: o}
	var out alloc.Output
	rng := rand.New(rand.NewPCG(1, 2))
	for it := range 3000 {
		broken := it%5 == 0
		in := randomHub(rng, o, broken)
		base := in.Now - in.Now%in.Window
		before := needOf(in.Reporters, base, in.Window, 20)
		p.Decide(in, &out)
		rs := append([]alloc.Reporter(nil), in.Reporters...)
		for i := range rs {
			rs[i].Segs = append([]alloc.Seg(nil), rs[i].Segs...)
		}
		for _, c := range out.Changes {
			alloc.Commit(&rs[c.R], c, in.Now, o)
		}
		after := needOf(rs, base, in.Window, 20)
		held := map[int64]float64{}
		for _, h := range in.Held {
			held[h.Window] = float64(h.N)
		}
		for k := range after {
			ws := base + int64(k)*in.Window
			room := max(held[ws], math.Ceil(before[k]))
			if after[k] > room+1e-6 {
				t.Fatalf("iteration %d window %d: need %v after the changes, held %v (before %v)\n%s", it, k, after[k], held[ws], before[k], dump(in, &out))
			}
			for _, rel := range out.Release {
				if rel.Window == ws && held[ws]-float64(rel.N) < math.Ceil(after[k])-1 {
					t.Fatalf("iteration %d: releases %d of window %d holding %v below the need %v", it, rel.N, k, held[ws], after[k])
				}
			}
		}
		changed := map[int]bool{}
		for _, c := range out.Changes {
			changed[c.R] = true
		}
		for i, r := range rs {
			if !r.Live {
				continue
			}
			if !r.Sent {
				if len(in.InFlight) > 0 || !in.Full && len(out.Reserve) > 0 {
					// It waits for the reservation on its way: the hub
					// plans again when the store answers.
					continue
				}
				t.Fatalf("iteration %d: live reporter %d got nothing\n%s", it, i, dump(in, &out))
			}
			// Renewed every renewal period; later only while it waits for
			// a reservation, and never past the moment the TTL left would
			// no longer cover a cut stream.
			period := r.Period
			if period <= 0 {
				period = o.ReportPeriod
			}
			deadline := r.LastSend + int64(r.CurTTL-period-o.Delivery-o.Margin)
			if at := o.RenewAt(&r); at <= in.Now && (!out.Short || in.Now >= deadline) {
				t.Fatalf("iteration %d: reporter %d's renewal is due and was not sent\n%s", it, i, dump(in, &out))
			} else if out.Next > at && (!out.Short || out.Next > max(deadline, in.Now+1)) {
				t.Fatalf("iteration %d: reporter %d's renewal is due at %v, the hub plans next at %v\n%s",
					it, i, time.Duration(at-in.Now), time.Duration(out.Next-in.Now), dump(in, &out))
			}
			// What an Envoy has left always covers a report period and
			// the margin, until the hub plans again.
			if left := r.LastSend + int64(r.CurTTL) - out.Next; left < int64(period+o.Delivery+o.Margin) {
				t.Fatalf("iteration %d: reporter %d has %v left when the hub plans next, less than a report period and the margin",
					it, i, time.Duration(left))
			}
			if changed[i] && r.CurTTL < o.TTLFor(&r) {
				t.Fatalf("iteration %d: reporter %d sent a TTL of %v, want %v", it, i, r.CurTTL, o.TTLFor(&r))
			}
		}
		if out.Next <= in.Now {
			t.Fatalf("iteration %d: next plan at %v, not after now", it, time.Duration(out.Next-in.Now))
		}
	}
}

func dump(in *alloc.Input, out *alloc.Output) string {
	s := fmt.Sprintf("limit %v window %v held %v\n", in.Plan.Limit, time.Duration(in.Window), in.Held)
	for i, r := range in.Reporters {
		s += fmt.Sprintf(" r%d live=%v claim=%+v sent=%v cur=%+v ttl=%v last=%v segs=%d\n", i, r.Live, r.Claim, r.Sent, r.Cur, r.CurTTL, time.Duration(r.LastSend-in.Now), len(r.Segs))
	}
	for _, c := range out.Changes {
		s += fmt.Sprintf(" change r%d %+v ttl=%v replace=%v\n", c.R, c.Strat, c.TTL, c.Replace)
	}
	return s
}

// TestNoReporterGivesBackEverything: a hub with no reporter left (not even
// a ghost) gives back all it holds, however little: nothing can spend it
// and no change will ask for it again. Holdings under 1 % of the limit
// were kept, "to be asked for again at the next change", and with no
// reporter the hub waited an hour for a next change.
func TestNoReporterGivesBackEverything(t *testing.T) {
	now := int64(1_700_000_000) * sec
	held := []alloc.Hold{{Window: now, N: 3}, {Window: now + sec, N: 7}, {Window: now + 2*sec, N: 500}}
	for _, kind := range []alloc.PlanKind{alloc.PlanDivide, alloc.PlanAllow, alloc.PlanDeny, alloc.PlanNone} {
		in := &alloc.Input{Now: now, Plan: alloc.Plan{Kind: kind, Limit: 1000}, Window: sec, Held: held}
		var out alloc.Output
		(&alloc.Planner{O: alloc.DefaultOptions()}).Decide(in, &out)
		if !slices.Equal(out.Release, held) || len(out.Reserve) != 0 || len(out.Changes) != 0 {
			t.Errorf("plan kind %v with no reporter: release %v, reserve %v, changes %v; want every holding %v released, nothing else",
				kind, out.Release, out.Reserve, out.Changes, held)
		}
	}
}
