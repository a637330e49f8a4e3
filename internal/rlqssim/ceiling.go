package rlqssim

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/sluicehq/sluice/engine/alloc"
)

// This file bounds what any RLQS server can let a fleet use of a limit
// that must never be passed in any window, whatever it assigns: it knows
// nothing of sluice's allocator. Envoy enforces a continuously refilled
// token bucket (rate r, max_tokens b) that may be full at any moment, so
// an Envoy may admit b + r·W within a window of W seconds. A server that
// holds the limit L in every window must keep Σ (b_i + r_i·W) ≤ L·W over
// the Envoys' buckets (ignoring the room a cut needs, which only lowers
// the bound). What each Envoy admits of its own arrivals under (r, b) is
// less than r when its arrivals are random: a bucket that sits full wastes
// the tokens it would have received, and one that is empty refuses. The
// ceiling is the most the fleet can admit under that budget while every
// Envoy gets at least a fraction of its max-min fair share.

// BucketThroughput is what a token bucket of rate r per second and b
// tokens, full at the start, admits per second of Poisson arrivals of
// mean lam per second over secs seconds of the seeded arrival stream.
// One stream for every (r, b) makes it monotone in both: more tokens
// never admit less of the same arrivals.
func BucketThroughput(r, b, lam, secs float64, seed uint64) float64 {
	if !(lam > 0) || !(secs > 0) || !(r >= 0) || !(b >= 1) {
		return 0
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	t, tokens, admitted := 0.0, b, 0.0
	for {
		gap := rng.ExpFloat64() / lam
		t += gap
		if t > secs {
			break
		}
		tokens = math.Min(b, tokens+gap*r)
		if tokens >= 1 {
			tokens--
			admitted++
		}
	}
	return admitted / secs
}

// CeilingOptions are the assumptions a Ceiling is computed under.
type CeilingOptions struct {
	// Window is the limit's window in seconds (1 for a per-second limit).
	Window float64
	// Fair is the least fraction of its max-min fair share each Envoy
	// gets, within (0, 1].
	Fair float64
	// Secs and Seed are BucketThroughput's.
	Secs float64
	Seed uint64
	// MaxTokens bounds the buckets tried.
	MaxTokens int
	// Renewed is how many times in each window an Envoy's bucket is
	// handed out anew, and full, beside the one it had: 0 for the global
	// clients, which keep an equal bucket's tokens; 1 for the per-worker
	// client (client_impl.cc makes a new TokenBucketImpl on every
	// assignment) renewed every report period of a second on a
	// per-second limit, as sluice renews it. Each new bucket costs its
	// max_tokens again, and alloc.LegacyCredit more (token_bucket_impl.cc).
	Renewed float64
}

// Validate reports options that give no meaningful ceiling.
func (o CeilingOptions) Validate() error {
	switch {
	case !(o.Window > 0):
		return fmt.Errorf("ceiling: window %v: must be positive", o.Window)
	case !(o.Fair > 0) || o.Fair > 1:
		return fmt.Errorf("ceiling: fair %v: must be within (0, 1]", o.Fair)
	case !(o.Secs >= 10):
		return fmt.Errorf("ceiling: secs %v: at least 10 seconds of arrivals", o.Secs)
	case o.MaxTokens < 1:
		return fmt.Errorf("ceiling: max tokens %d: at least 1", o.MaxTokens)
	case !(o.Renewed >= 0):
		return fmt.Errorf("ceiling: renewed %v: must be 0 or more", o.Renewed)
	}
	return nil
}

// Ceiling is the most a fleet of Envoys with Poisson arrivals of the given
// means (per second) can admit per second on average under a limit of
// limit per second that holds in every window of o.Window, when every
// Envoy admits at least o.Fair of its max-min fair share, and what each
// Envoy's cheapest bucket for that costs of the window's limit. An Envoy
// that must admit t per second costs the least b + r·W (and the renewals'
// buckets: o.Renewed) over buckets that admit t of its arrivals; what the costs leave is counted as if every
// token of it were admitted, up to what the Envoys ask beyond their
// floors. It fails when the floors alone cost more than the limit: no
// server can promise that fairness with these arrivals.
func Ceiling(limit float64, demands []float64, o CeilingOptions) (float64, []float64, error) {
	if err := o.Validate(); err != nil {
		return 0, nil, err
	}
	fair := FairShares(limit, demands)
	costs := make([]float64, len(demands))
	total, spent, gaps := 0.0, 0.0, 0.0
	for i, d := range demands {
		target := o.Fair * fair[i]
		if !(target > 0) {
			continue
		}
		costs[i] = cheapest(d, target, o)
		spent += costs[i]
		total += target
		gaps += d - target
	}
	budget := limit * o.Window
	if spent > budget {
		return 0, costs, fmt.Errorf("ceiling: the floors cost %.1f of a window's %.0f", spent, budget)
	}
	// What the floors leave admits at most one request a second for each
	// token of rate it buys, and no Envoy more than it asks for: an upper
	// bound, reached only by an Envoy asking far more than its rate.
	total += math.Min((budget-spent)/o.Window, gaps)
	return math.Min(total, limit), costs, nil
}

// tokensCost is what a bucket of b tokens costs of every window beside
// its rate: b, and b and LegacyCredit again for each renewal in it.
func (o CeilingOptions) tokensCost(b int) float64 {
	return float64(b) + o.Renewed*float64(b+alloc.LegacyCredit)
}

// cheapest is the least cost (tokensCost + r·W) of a bucket that admits at
// least target per second of Poisson arrivals of mean lam (over o's
// stream).
func cheapest(lam, target float64, o CeilingOptions) float64 {
	best := math.Inf(1)
	for b := 1; b <= o.MaxTokens; b++ {
		if o.tokensCost(b)+target*o.Window >= best {
			break // a bucket admits at most its rate, over a long stream
		}
		lo, hi := 0.0, 4*lam+float64(b)
		if BucketThroughput(hi, float64(b), lam, o.Secs, o.Seed) < target {
			continue
		}
		for hi-lo > 0.01 {
			m := (lo + hi) / 2
			if BucketThroughput(m, float64(b), lam, o.Secs, o.Seed) >= target {
				hi = m
			} else {
				lo = m
			}
		}
		best = math.Min(best, o.tokensCost(b)+hi*o.Window)
	}
	return best
}
