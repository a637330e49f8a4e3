package engine

import (
	"fmt"
	"time"
)

// Algorithm is how a rule counts. It is sluice's extension to the rule
// model: the reference has fixed windows only (and its strict YAML loader
// rejects the algorithm and burst keys). The zero value is the reference's
// fixed window, byte-identical in keys, TTLs, answers and statistics.
type Algorithm uint8

const (
	// FixedWindow counts hits per epoch-aligned window of the rule's unit.
	FixedWindow Algorithm = iota
	// SlidingWindow judges the weighted two-window estimate: the previous
	// window's count × the share of it still inside the rolling window, plus
	// the current window's count. It uses the fixed windows' counters (kept
	// one unit longer, so the previous one can be read).
	SlidingWindow
	// TokenBucket is GCRA: requests_per_unit tokens come back per unit, up
	// to Burst; one stored timestamp per key.
	TokenBucket
)

var algorithmNames = [...]string{"fixed_window", "sliding_window", "token_bucket"}

func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// ParseAlgorithm reads a YAML algorithm name; "" is the fixed window.
func ParseAlgorithm(s string) (Algorithm, bool) {
	if s == "" {
		return FixedWindow, true
	}
	for i, n := range algorithmNames {
		if n == s {
			return Algorithm(i), true
		}
	}
	return FixedWindow, false
}

// counting is what an algorithm does for one descriptor of a decision:
// the counter operations it makes and how it judges their answers. Each
// algorithm is a type of its own (fixed.go, sliding.go, bucket.go).
type counting interface {
	// admit refuses hits the rule can never admit.
	admit(in *limitInfo) error
	// key is the descriptor's cache key.
	key(s *Service, d *descriptorAt, in *limitInfo) string
	// appendOps appends the descriptor's counter operations to ops and
	// points in at them.
	appendOps(s *Service, d *descriptorAt, in *limitInfo, ops []CounterOp) []CounterOp
	// overIfCounted reports whether hits on top of what stop-increment
	// mode's read found would put the descriptor over its limit.
	overIfCounted(in *limitInfo, reads []CounterOp, hits uint64, now time.Time) bool
	// fill takes the counts of in's operations; wanted (stop-increment
	// mode) holds the hits each operation would have carried.
	fill(in *limitInfo, ops []CounterOp, wanted []uint64)
	// counts is the descriptor's count before and after its hits, as
	// judged against in.limitN.
	counts(in *limitInfo, now time.Time) (before, after uint64)
	// reset is the status's DurationUntilReset when the decision is
	// verdict; window is the time left in the fixed window.
	reset(in *limitInfo, v verdict, window time.Duration, now time.Time) time.Duration
	// cacheTTL is how long an over-limit key stays in the local cache.
	cacheTTL(unit time.Duration, reset time.Duration) time.Duration
}

// verdict is what a descriptor's decision came to.
type verdict uint8

const (
	within    verdict = iota
	over              // over its limit, by the counters
	localOver         // over its limit, by the local over-limit cache
)

// The compile-time check that each algorithm has all of counting.
var (
	_ counting = fixedWindow{}
	_ counting = slidingWindow{}
	_ counting = tokenBucket{}
)

// The methods of an Algorithm's counting, called through a switch rather
// than the interface: a pointer handed to a dynamic call escapes, and a
// decision's working state (its limitInfos, on the stack) would move to
// the heap with it.

func (a Algorithm) admit(in *limitInfo) error {
	switch a {
	case SlidingWindow:
		return slidingWindow{}.admit(in)
	case TokenBucket:
		return tokenBucket{}.admit(in)
	}
	return fixedWindow{}.admit(in)
}

func (a Algorithm) key(s *Service, d *descriptorAt, in *limitInfo) string {
	switch a {
	case SlidingWindow:
		return slidingWindow{}.key(s, d, in)
	case TokenBucket:
		return tokenBucket{}.key(s, d, in)
	}
	return fixedWindow{}.key(s, d, in)
}

func (a Algorithm) appendOps(s *Service, d *descriptorAt, in *limitInfo, ops []CounterOp) []CounterOp {
	switch a {
	case SlidingWindow:
		return slidingWindow{}.appendOps(s, d, in, ops)
	case TokenBucket:
		return tokenBucket{}.appendOps(s, d, in, ops)
	}
	return fixedWindow{}.appendOps(s, d, in, ops)
}

func (a Algorithm) overIfCounted(in *limitInfo, reads []CounterOp, hits uint64, now time.Time) bool {
	switch a {
	case SlidingWindow:
		return slidingWindow{}.overIfCounted(in, reads, hits, now)
	case TokenBucket:
		return tokenBucket{}.overIfCounted(in, reads, hits, now)
	}
	return fixedWindow{}.overIfCounted(in, reads, hits, now)
}

func (a Algorithm) fill(in *limitInfo, ops []CounterOp, wanted []uint64) {
	switch a {
	case SlidingWindow:
		slidingWindow{}.fill(in, ops, wanted)
	case TokenBucket:
		tokenBucket{}.fill(in, ops, wanted)
	default:
		fixedWindow{}.fill(in, ops, wanted)
	}
}

func (a Algorithm) counts(in *limitInfo, now time.Time) (before, after uint64) {
	switch a {
	case SlidingWindow:
		return slidingWindow{}.counts(in, now)
	case TokenBucket:
		return tokenBucket{}.counts(in, now)
	}
	return fixedWindow{}.counts(in, now)
}

func (a Algorithm) reset(in *limitInfo, v verdict, window time.Duration, now time.Time) time.Duration {
	switch a {
	case SlidingWindow:
		return slidingWindow{}.reset(in, v, window, now)
	case TokenBucket:
		return tokenBucket{}.reset(in, v, window, now)
	}
	return fixedWindow{}.reset(in, v, window, now)
}

func (a Algorithm) cacheTTL(unit, reset time.Duration) time.Duration {
	switch a {
	case SlidingWindow:
		return slidingWindow{}.cacheTTL(unit, reset)
	case TokenBucket:
		return tokenBucket{}.cacheTTL(unit, reset)
	}
	return fixedWindow{}.cacheTTL(unit, reset)
}

// descriptorAt is descriptor i of a request, at time now: what cache keys
// and operations are made of.
type descriptorAt struct {
	req  *Request
	i    int
	now  time.Time
	unix int64
}

// windowKey is the descriptor's key for the window of unit that starts
// at or before unix.
func (s *Service) windowKey(d *descriptorAt, in *limitInfo, unit Unit, unix int64) string {
	return s.cacheKey(d.req.Domain, d.req.Descriptors[d.i].Entries, in.m.sharedValues, unit, unix)
}
