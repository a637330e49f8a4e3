package alloc_test

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine/alloc"
)

// fleet plays Envoys that report one bucket every interval and enforce
// what they are assigned, to the allocation's arithmetic only: an Envoy
// admits min(demand, assigned rate) (its bucket's burst aside), and its
// next report carries what it admitted and denied.
type fleet struct {
	t        *testing.T
	plan     alloc.Plan
	o        alloc.Options
	interval time.Duration
	claims   []alloc.Claim
	assigned []alloc.Strategy
}

func newFleet(t *testing.T, limit float64, envoys int, interval time.Duration) *fleet {
	f := &fleet{t: t, plan: alloc.Plan{Kind: alloc.PlanDivide, Limit: limit}, o: alloc.DefaultOptions(), interval: interval,
		claims: make([]alloc.Claim, envoys), assigned: make([]alloc.Strategy, envoys)}
	// The subscriptions: one request each, about no time elapsed.
	for i := range f.claims {
		f.claims[i] = alloc.Rate(1, 0, 0, 0)
	}
	f.assign()
	return f
}

func (f *fleet) assign() {
	shares := alloc.Divide(f.plan.Limit, f.claims, f.o, nil)
	for i, s := range shares {
		st, ok := f.plan.Assign(s, f.o)
		if !ok {
			f.t.Fatalf("no strategy for share %v", s)
		}
		f.assigned[i] = st
	}
}

// step runs one reporting interval at demands (requests per second) and
// returns what each Envoy admitted per second under the assignment it had.
func (f *fleet) step(demands []float64) []float64 {
	admitted := make([]float64, len(demands))
	secs := f.interval.Seconds()
	for i, d := range demands {
		admitted[i] = math.Min(d, f.assigned[i].Rate())
		allowed := uint64(math.Round(admitted[i] * secs))
		denied := uint64(math.Round(d*secs)) - allowed
		// Envoy truncates the elapsed time; the server sees it whole.
		f.claims[i] = alloc.Rate(allowed, denied, f.interval.Truncate(time.Second), f.interval)
	}
	f.assign()
	return admitted
}

// TestFleetScenario: one bucket limited to 1,000/s, 10 Envoys, 3,000/s of
// demand. From the second interval on (the first assignment is made before
// any demand is known), the fleet admits 950–1,000/s, and every Envoy whose
// demand is at least its max-min fair share (found by bisection) gets at
// least 0.9 of it; when the heaviest goes idle, the next interval's
// assignments give the rest its share.
func TestFleetScenario(t *testing.T) {
	t.Parallel()
	skewed := []float64{2100, 600, 37.5, 37.5, 37.5, 37.5, 37.5, 37.5, 37.5, 37.5} // 70/20/10
	spread := []float64{300, 300, 300, 300, 300, 300, 300, 300, 300, 300}
	ramp := []float64{30, 90, 150, 210, 270, 330, 390, 450, 510, 570}
	cases := []struct {
		name     string
		demands  []float64
		interval time.Duration
	}{
		{"skewed 70/20/10", skewed, time.Second},
		{"spread", spread, time.Second},
		{"ramp", ramp, time.Second},
		{"skewed, 5 s reports", skewed, 5 * time.Second},
		{"skewed, 1.5 s reports (Envoy says 1 s)", skewed, 1500 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, 1000, len(c.demands), c.interval)
			for round := range 6 {
				admitted := f.step(c.demands)
				if round >= 1 {
					checkFleet(t, round, 1000, c.demands, admitted)
				}
			}
			// The heaviest goes idle: one interval reports it, the next
			// runs under the assignments made of that report.
			idle := append([]float64(nil), c.demands...)
			heaviest := 0
			for i, d := range idle {
				if d > idle[heaviest] {
					heaviest = i
				}
			}
			idle[heaviest] = 0
			f.step(idle)
			for round := range 3 {
				checkFleet(t, 100+round, 1000, idle, f.step(idle))
			}
		})
	}
}

func checkFleet(t *testing.T, round int, limit float64, demands, admitted []float64) {
	t.Helper()
	total, want := 0.0, 0.0
	for i := range admitted {
		total += admitted[i]
		want += demands[i]
	}
	want = math.Min(want, limit)
	if total > limit || total < 0.95*want {
		t.Fatalf("round %d: the fleet admitted %.1f/s, want %.0f–%.0f (demands %v, admitted %v)", round, total, 0.95*want, want, demands, admitted)
	}
	level := fairLevel(limit, demands)
	for i, d := range demands {
		fair := math.Min(d, level)
		if admitted[i] < 0.9*fair {
			t.Fatalf("round %d: Envoy %d admitted %.1f/s of demand %.1f, under 0.9 × its fair share %.1f (admitted %v)", round, i, admitted[i], d, fair, admitted)
		}
	}
}
