package engine

import (
	"errors"
	"fmt"
	"math"
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
// store count against the same counter. It is the Kind of an operation's
// LeaseTerms.
type LeaseKind uint8

const (
	// LeaseNone: the operation goes to the store.
	LeaseNone LeaseKind = iota
	// LeaseWindow: a fixed window's OpAdd.
	LeaseWindow
	// LeaseSliding: a sliding window's OpAdd on the current window's
	// counter; its LeaseSlidingPrev read, which shares its Pair label,
	// reads the previous window's counter, whose weighted count shares
	// the limit.
	LeaseSliding
	// LeaseSlidingPrev: the read of the previous window that belongs to
	// the LeaseSliding operation of the same Pair label.
	LeaseSlidingPrev
	// LeaseBucket: a token bucket step.
	LeaseBucket
)

// ErrBrokenPair is a leased sliding window's operation whose read of the
// previous window is missing, or a read whose operation is.
var ErrBrokenPair = errors.New("engine: sliding window operation and its previous window's read are not paired")

// SlidingRead is the read paired with ops[i], a LeaseSliding operation:
// the LeaseSlidingPrev operation of the same Pair label, wherever it is in
// ops (a caller may reorder or merge calls' operations). The engine puts
// it right after its operation, so that place is looked at first; it is
// taken only if its label matches. No read with the label is ErrBrokenPair.
func SlidingRead(ops []CounterOp, i int) (*CounterOp, error) {
	label := ops[i].Lease.Pair
	if label == 0 {
		return nil, fmt.Errorf("%w: %q has no pair label", ErrBrokenPair, ops[i].Key)
	}
	if j := i + 1; j < len(ops) && ops[j].Lease.Kind == LeaseSlidingPrev && ops[j].Lease.Pair == label {
		return &ops[j], nil
	}
	for j := range ops {
		if ops[j].Lease.Kind == LeaseSlidingPrev && ops[j].Lease.Pair == label {
			return &ops[j], nil
		}
	}
	return nil, fmt.Errorf("%w: no read for %q (pair %d)", ErrBrokenPair, ops[i].Key, label)
}

// leased reports whether rule l counts by lease under the service's options.
func (s *Service) leased(l *RateLimit) bool {
	c := l.Counting
	if c == CountDefault {
		c = s.o.Counting
	}
	return c == CountLease
}

// markLease sets the lease terms on the operations that appendOps made for
// in (see LeaseTerms). A sliding window's two operations get the same
// Pair label: the place of its operation in ops, counted from 1, which
// no other operation of the call has.
func markLease(ops []CounterOp, in *limitInfo, alg Algorithm, now time.Time) {
	op := &ops[in.op]
	op.Lease = LeaseTerms{Limit: uint32(min(in.limitN, math.MaxUint32)), UnitSec: int32(in.m.limit.Unit.Seconds()), At: now.UnixMicro()}
	switch alg {
	case SlidingWindow:
		op.Lease.Kind = LeaseSliding
		op.Lease.Pair = uint32(in.op + 1)
		ops[in.prevOp].Lease = LeaseTerms{Kind: LeaseSlidingPrev, Pair: op.Lease.Pair}
	case TokenBucket:
		op.Lease.Kind = LeaseBucket
	default:
		op.Lease.Kind = LeaseWindow
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
