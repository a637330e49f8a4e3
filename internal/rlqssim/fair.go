package rlqssim

import (
	"fmt"
	"math"
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

// Criteria are the promises a run of one bucket is judged by. A second is
// judged only when every Envoy's demand has been constant for Settle
// before it and through it: the start, a shift and an Envoy going idle
// each give the allocator Settle to follow.
type Criteria struct {
	Bucket int
	Limit  float64 // per second
	Settle time.Duration
	// The fleet admits at most Limit per second and at least MinFleet ×
	// min(Limit, total demand).
	MinFleet float64
	// An Envoy whose demand is at least its max-min fair share admits at
	// least MinShare × that share per second.
	MinShare float64
}

// Verdict is the outcome of Check: the seconds judged, the fleet's lowest
// and highest admitted count among them, and each broken promise.
type Verdict struct {
	Judged             int
	FleetMin, FleetMax uint64
	Failures           []string
}

// OK is true when seconds were judged and none broke a promise.
func (v Verdict) OK() bool { return v.Judged > 0 && len(v.Failures) == 0 }

const demandSample = 100 * time.Millisecond

// judge checks admitted[envoy][second] (unix seconds from first) of a run
// from start to end against c, with demand(envoy, t) the bucket's demand.
func judge(c Criteria, start, end time.Time, first int64, admitted [][]uint64, demand func(int, time.Duration) float64) Verdict {
	n := len(admitted)
	at := func(t time.Duration) []float64 {
		d := make([]float64, n)
		for e := range d {
			d[e] = demand(e, t)
		}
		return d
	}
	// Instants (offsets from start) at which some Envoy's demand changed.
	changes := []time.Duration{0}
	prev := at(0)
	for t := demandSample; t < end.Sub(start); t += demandSample {
		cur := at(t)
		for e := range cur {
			if cur[e] != prev[e] {
				changes = append(changes, t)
				break
			}
		}
		prev = cur
	}
	var v Verdict
	for s := first; time.Unix(s+1, 0).Compare(end) <= 0; s++ {
		from, to := time.Unix(s, 0).Sub(start), time.Unix(s+1, 0).Sub(start)
		if from < 0 || changedIn(changes, from-c.Settle, to) {
			continue
		}
		v.judgeSecond(c, s, int(s-first), admitted, at(from+(to-from)/2))
	}
	return v
}

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
	if len(v.Failures) < maxFailures {
		v.Failures = append(v.Failures, fmt.Sprintf(format, args...))
	}
}

// judgeSecond checks the second at index i of every Envoy's row.
func (v *Verdict) judgeSecond(c Criteria, s int64, i int, admitted [][]uint64, demands []float64) {
	var fleet uint64
	var total float64
	got := make([]uint64, len(admitted))
	for e, row := range admitted {
		if i < len(row) {
			got[e] = row[i]
		}
		fleet += got[e]
		total += demands[e]
	}
	v.Judged++
	if v.Judged == 1 || fleet < v.FleetMin {
		v.FleetMin = fleet
	}
	v.FleetMax = max(v.FleetMax, fleet)
	when := time.Unix(s, 0).UTC().Format("15:04:05")
	if float64(fleet) > c.Limit {
		v.fail("%s: the fleet admitted %d, over the limit %v", when, fleet, c.Limit)
	}
	if low := c.MinFleet * math.Min(c.Limit, total); float64(fleet) < low {
		v.fail("%s: the fleet admitted %d, under %.1f (%v × min(limit %v, demand %.1f))", when, fleet, low, c.MinFleet, c.Limit, total)
	}
	for e, share := range FairShares(c.Limit, demands) {
		if share <= 0 || demands[e] < share {
			continue
		}
		if float64(got[e]) < c.MinShare*share {
			v.fail("%s: Envoy %d admitted %d, under %v × its fair share %.1f (demand %.1f)", when, e, got[e], c.MinShare, share, demands[e])
		}
	}
}
