package alloc

import (
	"math"
	"time"
)

// OptBurst is the bucket size (tokens) that loses the least for a share
// (rate per second) against a demand whose arrivals vary as c·demand per
// second (c = 1: Poisson; near 0: even; above 1: in bunches; 0 is taken
// as 1), when each token of the bucket costs one count of every window
// of window seconds (it is reserved on top of the rate in each).
//
// A token bucket of rate r and size b facing a demand λ is a random walk
// of drift μ = |r − λ| and variance c·λ between an empty and a full
// bucket: requests are refused at the empty end (λ > r: tokens are lost
// at the full end), about μ/(e^{2μb/cλ} − 1) per second, or cλ/2b when μ
// is near 0. That loss falls convexly as b grows; the bucket where it
// falls by less than a token's cost is the one to pay for.
func OptBurst(share, demand, c, window float64) float64 {
	if !(share > 0) || !(demand > 0) || !(window > 0) || demand > 2*share || 2*demand < share {
		// Far from balance the walk stays at one end: an Envoy asking for
		// much more than its rate spends every token within a request's
		// gap, one asking for much less rarely finds its bucket empty.
		return MinTokens
	}
	if c <= 0 {
		c = 1
	}
	c = min(max(c, minBursty), maxBursty)
	mu, v := math.Abs(share-demand), c*demand
	loss := func(b float64) float64 {
		x := 2 * mu * b / v
		if x < 1e-9 {
			return v / (2 * b)
		}
		return mu / math.Expm1(x)
	}
	cost := func(b float64) float64 { return loss(b) + b/window }
	lo, hi := float64(MinTokens), float64(maxBurstTokens)
	for hi-lo > 1 {
		m := math.Floor((lo + hi) / 2)
		if cost(m+1) < cost(m) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if cost(hi) < cost(lo) {
		return hi
	}
	return lo
}

// maxBurstTokens bounds the bucket OptBurst sizes.
const maxBurstTokens = 256

// Learn updates r.Bursty (the variance of its arrivals, as a multiple of
// Poisson's) from one report of its Envoy under one bucket of rate and
// burst tokens throughout: the loss it showed (requests refused while its
// rate covered its demand; tokens unused while it asked for more) is what
// the random walk loses at that variance (OptBurst), solved for it, and
// averaged with what was learned before.
func Learn(r *Reporter, allowed, denied uint64, elapsed time.Duration, rate, burst float64) {
	secs := elapsed.Seconds()
	if secs < 1 || !(rate > 0) || !(burst > 0) || allowed+denied < 20 {
		return
	}
	demand := float64(allowed+denied) / secs
	var lost float64 // per second
	switch {
	case demand <= rate:
		lost = float64(denied) / secs
	case demand < 3*rate:
		lost = max(rate-float64(allowed)/secs, 0)
	default:
		return // every token is spent as it comes: nothing to learn
	}
	mu := max(math.Abs(rate-demand), 1e-3)
	var v float64
	if lost < 1e-3 {
		v = 0 // nothing lost: the least variance
	} else {
		v = 2 * mu * burst / math.Log1p(mu/lost)
	}
	c := min(max(v/demand, minBursty), maxBursty)
	if r.Bursty <= 0 {
		r.Bursty = 1
	}
	r.Bursty = (r.Bursty + c) / 2
}
