package alloc

import (
	"math"
	"slices"
	"time"
)

// MinElapsed is the shortest time a report's counts are taken over: Envoy
// reports no more often than every 100 ms, so a shorter span is a first
// report (the subscription, about zero seconds after the bucket's first
// request) or two reports bunched in transit, and its rate would be noise.
const MinElapsed = 100 * time.Millisecond

// maxRate bounds rates and limits (requests per second): far above any
// real one, and small enough that sums of a few thousand stay finite and
// exact enough.
const maxRate = 1e15

// Claim is what one reporter asks of a bucket, in requests per second.
type Claim struct {
	Rate float64
	// Known is false while the reporter's demand has not been measured
	// (its first report): it then claims the equal share.
	Known bool
}

// Rate is the demand of one usage report: the requests the Envoy's
// clients sent (allowed and denied) over the longer of the time the
// Envoy reported and the time the server observed since this stream's
// previous report of the bucket (0 if none). The longer, because Envoy
// truncates time_elapsed to whole seconds (reporting 1 s for 1.9 s), and
// reports may arrive bunched; either alone overstates demand. Shorter than
// MinElapsed, the demand is not known.
func Rate(allowed, denied uint64, reported, observed time.Duration) Claim {
	elapsed := max(reported, observed)
	if elapsed < MinElapsed {
		return Claim{}
	}
	return Claim{Rate: min((float64(allowed)+float64(denied))/elapsed.Seconds(), maxRate), Known: true}
}

// Divide divides limit (requests per second) among claims, max-min fair,
// and returns the shares in claims' order, in out's storage when it has
// room.
//
// Each reporter claims its demand (and Headroom of it), or FirstShare of
// the equal share while its demand is unknown (all of it when FirstShare
// is 0), and at least Floor of the equal share. Water-filling: the limit is
// poured evenly; a reporter whose claim is below the level gets its claim
// and the rest is poured over the others, until the limit is used or every
// claim is met. Every share is then at most its claim, a reporter that got
// less than its claim got the most of all, and the shares add up to the
// limit or to the claims, whichever is less. What the claims leave of the
// limit (the spare) is then handed out evenly, Spare of it, so the total
// is at most the limit and every share at most its claim plus
// Spare·spare/n. A limit that is not positive gives every reporter 0.
// Floor and Spare are taken within [0, 1] whatever o holds, so options
// that were never validated still keep the total within the limit.
func Divide(limit float64, claims []Claim, o Options, out []float64) []float64 {
	return divide(limit, claims, o, out, nil)
}

// divide is Divide, sorting in scratch's storage when it has room.
func divide(limit float64, claims []Claim, o Options, out []float64, scratch *[]float64) []float64 {
	n := len(claims)
	out = slices.Grow(out[:0], n)[:n]
	if n == 0 {
		return out
	}
	if !(limit > 0) { // also NaN
		clear(out)
		return out
	}
	limit = min(limit, maxRate)
	floor, spareShare := unit(o.Floor), unit(o.Spare)
	equal := limit / float64(n)
	first := equal
	if o.FirstShare > 0 {
		first = equal * unit(o.FirstShare)
	}
	for i, c := range claims {
		r := first
		if c.Known {
			r = c.Rate * (1 + unit(o.Headroom))
			if !(r >= 0) {
				r = 0
			}
			r = min(r, maxRate)
		}
		out[i] = max(r, floor*equal)
	}
	var sorted []float64
	if scratch != nil {
		sorted = *scratch
	}
	sorted = append(sorted[:0], out...)
	if scratch != nil {
		*scratch = sorted
	}
	level := waterLevel(limit, sorted)
	sum := 0.0
	for i := range out {
		out[i] = min(out[i], level)
		sum += out[i]
	}
	if spare := limit - sum; spare > 0 && spareShare > 0 {
		each := spareShare * spare / float64(n)
		for i := range out {
			out[i] += each
		}
	}
	return out
}

// waterLevel is the level λ at which Σ min(claims[i], λ) reaches limit,
// or +Inf when the claims together are below it. It sorts claims.
func waterLevel(limit float64, claims []float64) float64 {
	sorted := claims
	slices.Sort(sorted)
	rem := limit
	for k, c := range sorted {
		left := float64(len(sorted) - k)
		if c*left >= rem {
			return rem / left
		}
		rem -= c
	}
	return math.Inf(1)
}

// unit is f within [0, 1] (0 for NaN).
func unit(f float64) float64 {
	if !(f > 0) {
		return 0
	}
	return min(f, 1)
}

// Smooth is a reporter's claim after a new measurement: halfway from the
// old one, since one report of random arrivals over a few seconds is off
// by several per cent (a share that chases it refuses requests when low,
// and is a new bucket each time); a measurement more than half away from
// the old claim is taken as it is (the Envoy's demand changed).
func Smooth(old, measured Claim) Claim {
	if !old.Known || !measured.Known {
		return measured
	}
	if math.Abs(measured.Rate-old.Rate) > 0.5*max(old.Rate, 1) {
		return measured
	}
	return Claim{Rate: (old.Rate + measured.Rate) / 2, Known: true}
}
