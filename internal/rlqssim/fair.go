package rlqssim

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// FairShares divides limit max-min fair over demands by water-filling:
// an Envoy asking less than an equal part of what is left gets what it
// asks, the rest share the remainder equally. Written here, not taken
// from engine/rlqs, so that a check of sluice's allocator does not reuse
// the allocator.
func FairShares(limit float64, demands []float64) []float64 {
	shares := make([]float64, len(demands))
	idx := make([]int, 0, len(demands))
	for i, d := range demands {
		if d > 0 {
			idx = append(idx, i)
		}
	}
	sort.Slice(idx, func(a, b int) bool { return demands[idx[a]] < demands[idx[b]] })
	left := math.Max(limit, 0)
	for k, i := range idx {
		equal := left / float64(len(idx)-k)
		if demands[i] <= equal {
			shares[i] = demands[i]
			left -= demands[i]
			continue
		}
		for _, j := range idx[k:] {
			shares[j] = equal
		}
		break
	}
	return shares
}

// Criteria are the promises a run of one bucket is judged by.
type Criteria struct {
	// Limit is the rule's count per Window (1 s when zero): in no window
	// may the Envoys and the RLS callers on the same counter admit more.
	Limit  float64
	Window time.Duration
	// Settle: seconds within Settle after the start or a change of any
	// Envoy's demand are not judged for use and fairness.
	Settle time.Duration
	// FaultSettle: nor seconds within FaultSettle after a fault.
	FaultSettle time.Duration
	// The fleet admits at least MinFleet × min(limit, demand) in every
	// judged second.
	MinFleet float64
	// An Envoy admits, on average over the judged seconds of a stretch of
	// constant demand, at least MinShare × its max-min fair share (the RLS
	// callers count as one more claimant).
	MinShare float64
	// Smooth, when longer than a second, judges the fleet's use on its
	// mean over the last Smooth of judged seconds (random arrivals make
	// single seconds vary by themselves).
	Smooth time.Duration
	// Until, when set, is the run's length: a second that ends after it
	// (a live run's last, cut short) is checked against the limit but not
	// judged for use.
	Until time.Duration
	// MinMean: over all judged seconds, the fleet admits on average at
	// least MinMean of min(limit, demand) (0: not judged).
	MinMean float64
	// OverUntil, when set, ends the limit's check: a window that ends
	// after it is not checked. From then on what some Envoys admit is
	// their own fallback, which no server can reach (the per-worker
	// client never reopens a stream that was cut, so its assignments
	// lapse to its no_assignment_behavior at their TTL).
	OverUntil time.Duration
}

// Verdict is what Judge found.
type Verdict struct {
	// Windows is how many windows were checked against the limit, Over
	// how many were over it (by MaxOver at most).
	Windows, Over int
	MaxOver       float64
	// Judged seconds for use: the fleet's lowest, highest and mean.
	Judged             int
	FleetMin, FleetMax float64
	FleetMean          float64
	// Use is the mean over judged seconds of what the fleet admitted as a
	// share of min(limit, demand).
	Use float64
	// Worst is the lowest share of an Envoy's fair share it admitted.
	Worst    float64
	Failures []string
}

// OK is true when seconds were judged and nothing broke a promise.
func (v Verdict) OK() bool { return v.Judged > 0 && len(v.Failures) == 0 }

// Judge checks a run: admitted[envoy][second] by the Envoys, rls[second]
// by RLS callers on the same counter (nil: none) whose demand is
// rlsDemand per second, demand(envoy, t) the Envoys' demand at t into the
// run, faults the moments of faults.
func Judge(c Criteria, admitted [][]uint64, rls []uint64, rlsDemand float64, demand func(int, time.Duration) float64, faults []time.Duration) Verdict {
	if c.Window <= 0 {
		c.Window = time.Second
	}
	j := &judge{c: c, admitted: admitted, rls: rls, rlsDemand: rlsDemand, demand: demand, faults: faults, n: len(admitted)}
	for _, row := range admitted {
		j.secs = max(j.secs, len(row))
	}
	j.changes = []time.Duration{0}
	prev := j.at(0)
	for t := demandSample; t < time.Duration(j.secs)*time.Second; t += demandSample {
		cur := j.at(t)
		if !slices.Equal(cur, prev) {
			j.changes = append(j.changes, t)
		}
		prev = cur
	}
	j.windows()
	j.use()
	return j.v
}

// judge is one Judge call's inputs and findings.
type judge struct {
	c         Criteria
	admitted  [][]uint64
	rls       []uint64
	rlsDemand float64
	demand    func(int, time.Duration) float64
	faults    []time.Duration
	n, secs   int
	changes   []time.Duration
	v         Verdict
}

// at is every Envoy's demand at t.
func (j *judge) at(t time.Duration) []float64 {
	d := make([]float64, j.n)
	for e := range d {
		d[e] = j.demand(e, t)
	}
	return d
}

// fleetAt is what everyone admitted in second s.
func (j *judge) fleetAt(s int) float64 {
	f := 0.0
	for _, row := range j.admitted {
		if s < len(row) {
			f += float64(row[s])
		}
	}
	if s < len(j.rls) {
		f += float64(j.rls[s])
	}
	return f
}

// windows checks never over, in every window, settled or not.
func (j *judge) windows() {
	per := int(j.c.Window / time.Second)
	for w := 0; w+per <= j.secs; w += per {
		if j.c.OverUntil > 0 && time.Duration(w+per)*time.Second > j.c.OverUntil {
			break
		}
		sum := 0.0
		for s := w; s < w+per; s++ {
			sum += j.fleetAt(s)
		}
		j.v.Windows++
		if sum > j.c.Limit {
			j.v.Over++
			j.v.MaxOver = max(j.v.MaxOver, sum-j.c.Limit)
			j.v.fail("window at %ds: %.0f admitted, over the limit %v", w, sum, j.c.Limit)
		}
	}
}

// quiet is true when no demand change or fault is near [from, to).
func (j *judge) quiet(from, to time.Duration) bool {
	if changedIn(j.changes, from-j.c.Settle, to) {
		return false
	}
	for _, f := range j.faults {
		if f < to && f > from-j.c.FaultSettle {
			return false
		}
	}
	return true
}

// stretch is a run of settled seconds: what each Envoy got and its fair
// share, summed.
type stretch struct {
	got, fair []float64
	n         int
}

// use checks use and fairness, in the settled seconds of each stretch.
func (j *judge) use() {
	c, v := &j.c, &j.v
	perSecond := c.Limit / c.Window.Seconds()
	var cur *stretch
	var stretches []*stretch
	useN := 0
	for s := 0; s < j.secs; s++ {
		from := time.Duration(s) * time.Second
		use, ok := j.smoothed(s)
		if c.Until > 0 && from+time.Second > c.Until {
			ok = false
		}
		if !ok {
			cur = nil
			continue
		}
		d := j.at(from + time.Second/2)
		total := j.rlsDemand
		for _, x := range d {
			total += x
		}
		fleet := j.fleetAt(s)
		v.Judged++
		if v.Judged == 1 || fleet < v.FleetMin {
			v.FleetMin = fleet
		}
		v.FleetMax = max(v.FleetMax, fleet)
		v.FleetMean += fleet
		if could := math.Min(perSecond, total); could > 0 {
			v.Use += fleet / could
			useN++
		}
		if low := c.MinFleet * math.Min(perSecond, total); use < low {
			v.fail("second %d: the fleet admitted %.0f, under %.1f (%v × min(limit %v, demand %.1f))", s, use, low, c.MinFleet, perSecond, total)
		}
		if cur == nil {
			cur = &stretch{got: make([]float64, j.n), fair: make([]float64, j.n)}
			stretches = append(stretches, cur)
		}
		fair := FairShares(perSecond, append(d, j.rlsDemand))
		for e := range j.n {
			cur.got[e] += float64(j.admitted[e][s])
			cur.fair[e] += fair[e]
		}
		cur.n++
	}
	if v.Judged > 0 {
		v.FleetMean /= float64(v.Judged)
		if useN > 0 {
			v.Use /= float64(useN)
		}
		if useN > 0 && v.Use < c.MinMean {
			v.fail("the fleet admitted %.3f of min(limit, demand) on average over %d judged seconds, under %v", v.Use, v.Judged, c.MinMean)
		}
	}
	j.fairness(stretches)
}

// smoothed is the fleet's use in second s (averaged over c.Smooth), and
// whether s is settled enough to judge.
func (j *judge) smoothed(s int) (float64, bool) {
	to := time.Duration(s+1) * time.Second
	if !j.quiet(time.Duration(s)*time.Second, to) {
		return 0, false
	}
	n := int(j.c.Smooth / time.Second)
	if n <= 1 {
		return j.fleetAt(s), true
	}
	if s-n+1 < 0 || !j.quiet(time.Duration(s-n+1)*time.Second, to) {
		return 0, false
	}
	sum := 0.0
	for k := s - n + 1; k <= s; k++ {
		sum += j.fleetAt(k)
	}
	return sum / float64(n), true
}

// fairness checks each Envoy's share of its fair share over each stretch.
func (j *judge) fairness(stretches []*stretch) {
	v := &j.v
	v.Worst = math.Inf(1)
	// A stretch of a second or two says little about fairness: at 43/s,
	// Poisson arrivals alone vary by ±15 % a second.
	least := max(3, int(j.c.Smooth/time.Second))
	for _, st := range stretches {
		if st.n < least {
			continue
		}
		for e := range j.n {
			if st.fair[e] <= 0 {
				continue
			}
			ratio := st.got[e] / st.fair[e]
			v.Worst = min(v.Worst, ratio)
			if ratio < j.c.MinShare {
				v.fail("Envoy %d admitted %.1f/s over %d seconds, %.2f of its fair share %.1f/s", e, st.got[e]/float64(st.n), st.n, ratio, st.fair[e]/float64(st.n))
			}
		}
	}
	if math.IsInf(v.Worst, 1) {
		v.Worst = 0
	}
}

const demandSample = 100 * time.Millisecond

func changedIn(changes []time.Duration, from, to time.Duration) bool {
	for _, t := range changes {
		if t > from && t < to {
			return true
		}
	}
	return false
}

const maxFailures = 40

func (v *Verdict) fail(format string, args ...any) {
	if len(v.Failures) == maxFailures {
		v.Failures = append(v.Failures, "… (more failures left out)")
	}
	if len(v.Failures) <= maxFailures {
		v.Failures = append(v.Failures, fmt.Sprintf(format, args...))
	}
}
