package rlqssim

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// arrivals are the moments of the requests in [t, t+step).
func (s *vsim) arrivals(acc *accumulator, rate float64, t time.Time, step time.Duration) []time.Time {
	if rate <= 0 {
		return nil
	}
	var n int
	if s.cfg.Arrivals == Poisson {
		n = poisson(s.rng, rate*step.Seconds())
	} else {
		n = acc.add(rate, step)
	}
	out := make([]time.Time, n)
	for i := range out {
		if s.cfg.Arrivals == Poisson {
			out[i] = t.Add(time.Duration(s.rng.Int64N(int64(step))))
		} else {
			out[i] = t.Add(step * time.Duration(i) / time.Duration(n))
		}
	}
	if s.cfg.Arrivals == Poisson {
		sortTimes(out)
	}
	return out
}

// sortTimes sorts arrivals in O(n log n): their number follows the time
// since a worker's last tick, which a starved machine stretches, and an
// insertion sort's O(n²) then stretched the next tick's further, until a
// live fleet test hung (server's TestQuotaFleetNeverOver under make
// test-stress sorted 3.2 million Poisson arrivals for an hour).
func sortTimes(ts []time.Time) {
	slices.SortFunc(ts, time.Time.Compare)
}

// poisson draws from a Poisson distribution of mean m.
func poisson(rng *rand.Rand, m float64) int {
	if m > 30 {
		return max(0, int(math.Round(m+math.Sqrt(m)*rng.NormFloat64())))
	}
	l, k, p := math.Exp(-m), 0, 1.0
	for {
		p *= rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}
