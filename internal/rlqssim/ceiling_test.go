package rlqssim

import (
	"math"
	"testing"
)

// TestBucketThroughput checks the token bucket against what must hold of
// any: it admits no more than its arrivals nor (over a long stream) its
// rate, admits almost all arrivals when its rate and bucket are large,
// and more tokens never admit less of the same arrivals.
func TestBucketThroughput(t *testing.T) {
	t.Parallel()
	const secs, seed = 2000, 7
	cases := []struct {
		name          string
		r, b, lam     float64
		atLeast, most float64
	}{
		{"far below demand: its rate", 100, 2, 2000, 99, 100.1},
		// A one-token bucket loses what accrues while it is full, waiting
		// for the next arrival: a twentieth here.
		{"one token, far below demand", 100, 1, 2000, 90, 99},
		{"large rate and bucket: the arrivals", 200, 50, 43, 42, 44},
		{"at balance, 5 tokens: refuses some", 43, 5, 43, 36, 41},
		{"no arrivals", 10, 2, 0, 0, 0},
	}
	for _, c := range cases {
		got := BucketThroughput(c.r, c.b, c.lam, secs, seed)
		if got < c.atLeast || got > c.most {
			t.Errorf("%s: r=%v b=%v lam=%v admitted %.2f/s, want within [%v, %v]", c.name, c.r, c.b, c.lam, got, c.atLeast, c.most)
		}
	}
	prev := 0.0
	for _, b := range []float64{1, 2, 4, 8, 16} {
		got := BucketThroughput(43, b, 43, secs, seed)
		if got < prev {
			t.Errorf("b=%v admitted %.2f, less than a smaller bucket's %.2f", b, got, prev)
		}
		prev = got
	}
}

// TestCeilingOfTheScenarioFleet is the bound behind the Poisson floors:
// the fleet (one Envoy at 2,100/s, two at 300/s, seven at about
// 43/s on 1,000/s, per-second windows) with Poisson arrivals cannot be
// kept within the limit in every window and use much more than 0.9 of it
// while every Envoy gets 0.9 of its fair share, whatever the server does.
// Per-worker Envoys, handed a new full bucket by a renewal every window
// (every report period of a second, on a per-second limit), pay their
// tokens twice: 0.9 of every fair share costs more than the limit, and
// 0.85 leaves at most about 0.87 of it. A ceiling of 0 wants the floors
// to cost more than the limit: no server can promise that fairness.
func TestCeilingOfTheScenarioFleet(t *testing.T) {
	t.Parallel()
	demands := scenarioDemands()
	for _, tc := range []struct {
		fair, renewed float64
		lo, hi        float64
	}{
		{fair: 0.85, lo: 921, hi: 950},
		{fair: 0.9, lo: 880, hi: 935},
		{fair: 0.95},
		{fair: 0.85, renewed: 1, lo: 840, hi: 885},
		{fair: 0.9, renewed: 1},
	} {
		o := CeilingOptions{Window: 1, Fair: tc.fair, Secs: 200, Seed: 1, MaxTokens: 24, Renewed: tc.renewed}
		ceil, costs, err := Ceiling(ScenarioLimit, demands, o)
		t.Logf("fair %.2f, renewed %v: ceiling %.1f/s, costs %.1f, %v", tc.fair, tc.renewed, ceil, costs, err)
		switch {
		case tc.hi == 0 && err == nil:
			t.Errorf("fair %.2f, renewed %v: ceiling %.1f, want the floors to cost more than the limit", tc.fair, tc.renewed, ceil)
		case tc.hi > 0 && err != nil:
			t.Errorf("fair %.2f, renewed %v: %v", tc.fair, tc.renewed, err)
		case tc.hi > 0 && (ceil < tc.lo || ceil > tc.hi):
			t.Errorf("fair %.2f, renewed %v: ceiling %.1f, want within [%.0f, %.0f]", tc.fair, tc.renewed, ceil, tc.lo, tc.hi)
		}
	}
}

// TestCeilingRejects: options without a meaning, and floors that cost
// more than the limit, are errors naming what is wrong.
func TestCeilingRejects(t *testing.T) {
	t.Parallel()
	good := CeilingOptions{Window: 1, Fair: 0.9, Secs: 50, Seed: 1, MaxTokens: 8}
	for _, o := range []CeilingOptions{
		{Window: 0, Fair: 0.9, Secs: 50, MaxTokens: 8},
		{Window: 1, Fair: 1.5, Secs: 50, MaxTokens: 8},
		{Window: 1, Fair: math.NaN(), Secs: 50, MaxTokens: 8},
		{Window: 1, Fair: 0.9, Secs: 1, MaxTokens: 8},
		{Window: 1, Fair: 0.9, Secs: 50},
		{Window: 1, Fair: 0.9, Secs: 50, MaxTokens: 8, Renewed: -1},
	} {
		if _, _, err := Ceiling(1000, []float64{100}, o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	// A hundred Envoys at 10/s on 1,000/s: each needs its bucket on top
	// of its rate, more than the limit holds.
	many := make([]float64, 100)
	for i := range many {
		many[i] = 10
	}
	if _, _, err := Ceiling(1000, many, good); err == nil {
		t.Error("a hundred Envoys at 10/s on 1,000/s: no error")
	}
}

// scenarioDemands are the scenario fleet's demands before the shift.
func scenarioDemands() []float64 {
	d := skewed()
	out := make([]float64, 10)
	for e := range out {
		out[e] = d(e, 0, 0)
	}
	return out
}
