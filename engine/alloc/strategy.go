package alloc

import (
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// Kind is the kind of rate limit strategy an Envoy is told to enforce.
type Kind uint8

const (
	// AllowAll is the blanket rule ALLOW_ALL.
	AllowAll Kind = iota
	// DenyAll is the blanket rule DENY_ALL.
	DenyAll
	// TokenBucket is a token_bucket strategy.
	TokenBucket
)

func (k Kind) String() string {
	switch k {
	case AllowAll:
		return "ALLOW_ALL"
	case DenyAll:
		return "DENY_ALL"
	case TokenBucket:
		return "token_bucket"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Strategy is what one Envoy enforces for one bucket: the
// RateLimitStrategy of a QuotaAssignmentAction.
type Strategy struct {
	Kind Kind
	// For TokenBucket: Envoy's bucket holds MaxTokens (and starts full),
	// and gains TokensPerFill every FillInterval (whole seconds),
	// continuously.
	MaxTokens     uint32
	TokensPerFill uint32
	FillInterval  time.Duration
}

// Rate is what s admits in the long run, in requests per second.
func (s Strategy) Rate() float64 {
	switch s.Kind {
	case AllowAll:
		return math.Inf(1)
	case TokenBucket:
		if s.FillInterval > 0 {
			return float64(s.TokensPerFill) / s.FillInterval.Seconds()
		}
	}
	return 0
}

// PlanKind is how a bucket's rule is served.
type PlanKind uint8

const (
	// PlanNone: no assignment is sent (Options.NoMatch none).
	PlanNone PlanKind = iota
	// PlanAllow: every reporter gets ALLOW_ALL.
	PlanAllow
	// PlanDeny: every reporter gets DENY_ALL.
	PlanDeny
	// PlanDivide: Limit is divided among the reporters (Divide, Assign).
	PlanDivide
)

// Plan is what a bucket's rule makes of its reporters.
type Plan struct {
	Kind PlanKind
	// Limit is the rule's rate in requests per second: what PlanDivide
	// divides, and, for a shadow-mode rule, what the caller judges the
	// reported demand against for the statistics.
	Limit float64
	// Burst is the fleet-wide bucket size in tokens of a token-bucket
	// rule, shared out in proportion to the shares; 0 for other rules,
	// whose buckets hold Options.Burst of their share.
	Burst float64
	// Shadow is a shadow-mode rule's plan: ALLOW_ALL, its statistics
	// counted by the caller as if Limit applied.
	Shadow bool
}

// PlanFor is the plan of rule l, the rule a bucket matched (nil when it
// matched none, or its domain is not configured). An unlimited rule allows
// all; a shadow-mode rule allows all (the Envoys must not deny, and the
// statistics still say what the limit would have done); a limit of zero
// denies all; a rule whose unit is not a window (it cannot be loaded) is
// taken as no match.
func PlanFor(l *engine.RateLimit, o Options) Plan {
	switch {
	case l == nil || (!l.Unlimited && !l.Unit.Valid()):
		switch o.NoMatch {
		case NoMatchAllow:
			return Plan{Kind: PlanAllow}
		case NoMatchDeny:
			return Plan{Kind: PlanDeny}
		}
		return Plan{Kind: PlanNone}
	case l.Unlimited:
		return Plan{Kind: PlanAllow}
	}
	limit := float64(l.RequestsPerUnit) / float64(l.Unit.Seconds())
	switch {
	case l.ShadowMode:
		return Plan{Kind: PlanAllow, Limit: limit, Shadow: true}
	case l.RequestsPerUnit == 0:
		return Plan{Kind: PlanDeny}
	}
	p := Plan{Kind: PlanDivide, Limit: limit}
	if l.Algorithm == engine.TokenBucket {
		// The engine's bucket holds the rule's burst, or requests_per_unit.
		p.Burst = float64(l.RequestsPerUnit)
		if l.Burst > 0 {
			p.Burst = float64(l.Burst)
		}
	}
	return p
}

// Assign is the strategy of a reporter whose share (requests per second,
// from Divide) is share; ok is false for PlanNone (send nothing).
//
// The fill interval is whole seconds, because Envoy reads no less, and
// tokens_per_fill the share over it rounded down, because the shares add
// up to the limit (perFill: 1 s unless that loses 1 % or more of a small
// share). A share under 1/s gets one token per the whole seconds it takes
// (rounded up),
// DENY_ALL if that is longer than Options.MaxFill. The bucket holds
// Options.Burst of the share, or, under a token-bucket rule, the share's
// part of the rule's burst; at least MinTokens (one for shares under
// MinTokens per second, and under a token-bucket rule).
func (p Plan) Assign(share float64, o Options) (s Strategy, ok bool) {
	return p.AssignBurst(share, 0, o)
}

// AssignBurst is Assign with a bucket of at least burst tokens (for a
// rule that is not a token bucket: the planner sizes the buckets of
// Envoys whose share meets their demand for their arrivals).
func (p Plan) AssignBurst(share, tokens float64, o Options) (s Strategy, ok bool) {
	switch p.Kind {
	case PlanNone:
		return Strategy{}, false
	case PlanAllow:
		return Strategy{Kind: AllowAll}, true
	case PlanDeny:
		return Strategy{Kind: DenyAll}, true
	}
	share = min(share, p.Limit)
	if !(share > 0) {
		return Strategy{Kind: DenyAll}, true
	}
	s = Strategy{Kind: TokenBucket, TokensPerFill: 1, FillInterval: time.Second}
	if share >= 1 {
		s.TokensPerFill, s.FillInterval = perFill(share)
	} else {
		secs := math.Ceil(1 / share)
		if secs > o.MaxFill.Seconds() {
			return Strategy{Kind: DenyAll}, true
		}
		s.FillInterval = time.Duration(secs) * time.Second
	}
	burst := share * o.Burst.Seconds()
	if p.Burst > 0 {
		burst = p.Burst * share / p.Limit
	} else if share >= MinTokens {
		burst = max(burst, math.Ceil(tokens-1e-9))
	}
	// A bucket of one token at a rate just under the demand loses about
	// half of it: a request that finds 0.98 of a token is denied, and
	// what accrues while the bucket is full is lost. Two tokens carry it.
	// Under a token-bucket rule the buckets together hold its burst.
	least := 1.0
	if share >= MinTokens && p.Burst == 0 {
		least = MinTokens
	}
	s.MaxTokens = uint32(max(least, min(math.Floor(burst), math.MaxUint32)))
	return s, true
}

// perFill writes a share of at least 1/s as tokens per whole seconds: per
// second, rounded down, when that loses under 1 %; else over the fewest
// seconds (up to fractionSeconds) that lose the least, so that 1.33/s is
// 4 per 3 s rather than 1 per second (Envoy refills continuously, so the
// rate is what counts, not the interval).
func perFill(share float64) (uint32, time.Duration) {
	best, bestK := math.Floor(share), 1.0
	if share-best < 0.01*share {
		return uint32(min(best, math.MaxUint32)), time.Second
	}
	for k := 2.0; k <= fractionSeconds; k++ {
		if r := math.Floor(share*k) / k; r > best+1e-9 {
			best, bestK = r, k
		}
	}
	return uint32(best * bestK), time.Duration(bestK) * time.Second
}

// fractionSeconds is the longest fill interval perFill uses for a share
// of 1/s or more.
const fractionSeconds = 10

// MinTokens is the least a bucket holds when its share allows it.
const MinTokens = 2

// Keep reports whether an Envoy whose active strategy is cur keeps it
// (sluice sends cur again, extending its TTL) rather than being sent next.
// Envoy refills a replaced token bucket, so every change of assignment
// lets max_tokens through at once; a change is worth that only when it
// takes something back, or gives noticeably more. cur is kept when it is
// next, or when both are token buckets and cur admits no more than next
// (its rate and its bucket), at least 1−hysteresis of next's rate, and a
// bucket not much smaller than next's (a quarter, and a token). Keeping
// never admits more than next, so the fleet's total stays within the
// limit.
func Keep(cur, next Strategy, hysteresis float64) bool {
	if cur == next {
		return true
	}
	if cur.Kind != TokenBucket || next.Kind != TokenBucket {
		return false
	}
	rc, rn := cur.Rate(), next.Rate()
	return rc <= rn && rc >= (1-hysteresis)*rn && cur.MaxTokens <= next.MaxTokens &&
		float64(next.MaxTokens) <= 1.25*float64(cur.MaxTokens)+1
}

// Near reports whether next takes back at most frac of cur's rate, or at
// most one request a second (a whole token: small shares move by tokens),
// and holds no more tokens: a cut not worth a new bucket.
func Near(cur, next Strategy, frac float64) bool {
	if cur.Kind != TokenBucket || next.Kind != TokenBucket {
		return false
	}
	rc, rn := cur.Rate(), next.Rate()
	return rn < rc && rc-rn <= max(frac*rc, 1) && next.MaxTokens <= cur.MaxTokens
}

// EnvoyEqual reports whether Envoy takes a and b for the same token
// bucket: it compares max_tokens, tokens_per_fill and the nanoseconds of
// fill_interval, so buckets that differ only in whole seconds of
// fill_interval look equal and the Envoy keeps the one it has.
func EnvoyEqual(a, b Strategy) bool {
	return a.Kind == TokenBucket && b.Kind == TokenBucket && a.MaxTokens == b.MaxTokens &&
		a.TokensPerFill == b.TokensPerFill && a.FillInterval%time.Second == b.FillInterval%time.Second
}

// Distinct is next written so that Envoy tells it from cur: the same rate
// (tokens accrue continuously at tokens_per_fill ÷ fill_interval) and the
// same bucket, with tokens_per_fill and fill_interval both multiplied.
func Distinct(cur, next Strategy) Strategy {
	for k := uint32(2); ; k++ {
		d := next
		d.TokensPerFill *= k
		d.FillInterval *= time.Duration(k)
		if !EnvoyEqual(cur, d) {
			return d
		}
	}
}
