package engine

import (
	"fmt"
	"time"
)

// Counting is how a rule's hits reach the shared counters. It is sluice's
// extension (`counting:` beside `algorithm:`); the reference counts every
// decision in the store, which is CountExact.
type Counting uint8

const (
	// CountDefault is a rule that names no counting: the service's
	// Options.Counting decides (SLUICE_COUNTING).
	CountDefault Counting = iota
	// CountExact sends every decision's hits to the store (the reference).
	CountExact
	// CountLease answers decisions from hits reserved ahead from the shared
	// counter by one atomic operation (see LeaseKind and lease).
	CountLease
)

var countingNames = [...]string{"", "exact", "lease"}

func (c Counting) String() string {
	if int(c) < len(countingNames) {
		if c == CountDefault {
			return "default"
		}
		return countingNames[c]
	}
	return fmt.Sprintf("counting(%d)", uint8(c))
}

// ParseCounting reads a counting name; "" is CountDefault.
func ParseCounting(s string) (Counting, bool) {
	for i, n := range countingNames {
		if n == s {
			return Counting(i), true
		}
	}
	return CountDefault, false
}

// LeaseKind marks an operation that a lease layer may answer from a
// reservation, and says how: the lease layer reserves blocks of hits with
// OpReserve (windows) or OpTokenTake (buckets) on the operation's own key,
// so that exact-mode replicas and envoyproxy/ratelimit replicas on the same
// store count against the same counter.
type LeaseKind uint8

const (
	// LeaseNone: the operation goes to the store.
	LeaseNone LeaseKind = iota
	// LeaseWindow: a fixed window's OpAdd; Limit is the most the counter
	// may reach in its window of UnitSec seconds.
	LeaseWindow
	// LeaseSliding: a sliding window's OpAdd on the current window's
	// counter; the operation right after it, LeaseSlidingPrev, reads the
	// previous window's counter, whose weighted count shares Limit.
	LeaseSliding
	// LeaseSlidingPrev: the read of the previous window that belongs to
	// the LeaseSliding operation before it.
	LeaseSlidingPrev
	// LeaseBucket: a token bucket step (Now, Interval and Burst as for
	// OpTokenBucket).
	LeaseBucket
)

// leased reports whether rule l counts by lease under the service's options.
func (s *Service) leased(l *RateLimit) bool {
	c := l.Counting
	if c == CountDefault {
		c = s.o.Counting
	}
	return c == CountLease
}

// markLease sets the lease terms on the operations that appendOps made for
// in. A window's operation carries the decision's time in Now: its key
// names the window that time is in, and the lease layer reckons the
// window's end from it (not from its own clock, read later).
func markLease(ops []CounterOp, in *limitInfo, alg Algorithm, now time.Time) {
	op := &ops[in.op]
	op.Limit, op.UnitSec = in.limitN, in.m.limit.Unit.Seconds()
	switch alg {
	case SlidingWindow:
		op.Lease = LeaseSliding
		ops[in.prevOp].Lease = LeaseSlidingPrev
		op.Now = now.UnixMicro()
	case TokenBucket:
		op.Lease = LeaseBucket
	default:
		op.Lease = LeaseWindow
		op.Now = now.UnixMicro()
	}
}

// ruleCounting reads a rule's counting.
func ruleCounting(file string, r *RateLimitConfig) (Counting, error) {
	c, ok := ParseCounting(r.Counting)
	switch {
	case !ok:
		return c, &ConfigError{file, fmt.Sprintf("invalid rate limit counting '%s' (want exact or lease)", r.Counting)}
	case r.Unlimited && r.Counting != "":
		return c, &ConfigError{file, "should not specify rate limit counting when unlimited"}
	}
	return c, nil
}
