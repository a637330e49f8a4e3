package rlqssim

import (
	"errors"
	"fmt"
	"time"
)

// Demand is the rate, in requests per second, at which Envoy envoy's
// clients send requests into bucket bucket (an index into Config.Buckets)
// at t after the start of the run. It is called from every Envoy's
// goroutine at once, so it must not keep state; the patterns below are
// pure.
type Demand func(envoy, bucket int, t time.Duration) float64

// Group is a run of consecutive Envoys sharing Share of a skewed total
// equally.
type Group struct {
	Envoys int
	Share  float64
}

// Skewed splits total (per bucket) over groups of Envoys in order: with
// {1, 70}, {2, 20}, {7, 10}, Envoy 0 sends 70% of it, Envoys 1 and 2 10%
// each and Envoys 3..9 a seventh of 10% each. Shares are relative (they
// need not sum to 1 or 100); Envoys past the groups send nothing.
func Skewed(total float64, groups []Group) (Demand, error) {
	if total < 0 {
		return nil, fmt.Errorf("skewed demand: negative total %v", total)
	}
	if len(groups) == 0 {
		return nil, errors.New("skewed demand: no groups")
	}
	var sum float64
	var rates []float64
	for i, g := range groups {
		if g.Envoys < 1 || g.Share < 0 {
			return nil, fmt.Errorf("skewed demand: group %d needs at least one Envoy and a share not negative (got %d, %v)", i, g.Envoys, g.Share)
		}
		sum += g.Share
	}
	if sum <= 0 {
		return nil, errors.New("skewed demand: the shares sum to zero")
	}
	for _, g := range groups {
		r := total * g.Share / sum / float64(g.Envoys)
		for range g.Envoys {
			rates = append(rates, r)
		}
	}
	return func(envoy, _ int, _ time.Duration) float64 {
		if envoy < 0 || envoy >= len(rates) {
			return 0
		}
		return rates[envoy]
	}, nil
}

// Spread gives each of envoys Envoys an equal part of total per bucket.
func Spread(total float64, envoys int) Demand {
	return func(envoy, _ int, _ time.Duration) float64 {
		if envoy < 0 || envoy >= envoys {
			return 0
		}
		return total / float64(envoys)
	}
}

// Shifting moves d's pattern one Envoy along every period: in the k-th
// period Envoy e sends what d gives Envoy (e − k) mod envoys, so the heavy
// Envoy changes every period.
func Shifting(d Demand, envoys int, period time.Duration) Demand {
	if envoys < 1 || period <= 0 {
		return d
	}
	return func(envoy, bucket int, t time.Duration) float64 {
		k := int(t / period)
		return d(((envoy-k)%envoys+envoys)%envoys, bucket, t)
	}
}

// IdleAt stops Envoy envoy's demand (all buckets) from at on.
func IdleAt(d Demand, envoy int, at time.Duration) Demand {
	return func(e, bucket int, t time.Duration) float64 {
		if e == envoy && t >= at {
			return 0
		}
		return d(e, bucket, t)
	}
}

// accumulator turns a rate into whole requests per tick, carrying the
// fraction, so 42.9/s in 10 ms ticks is 429 requests in ten seconds.
type accumulator struct{ frac float64 }

func (a *accumulator) add(rate float64, dt time.Duration) int {
	if rate <= 0 || dt <= 0 {
		return 0
	}
	a.frac += rate * dt.Seconds()
	n := int(a.frac)
	a.frac -= float64(n)
	return n
}
