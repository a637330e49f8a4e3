package engine

import (
	"errors"
	"fmt"
	"time"
)

// OpKind says what a backend does with one CounterOp, and so which of its
// fields the operation carries (see CounterOp).
type OpKind uint8

const (
	// OpAdd adds Hits and sets the TTL (Redis INCRBY + EXPIRE); After is the new value.
	OpAdd OpKind = iota
	// OpGet reads the counter without changing it or its TTL (Redis GET); After is the value, 0 if missing.
	OpGet
	// OpTokenBucket is one GCRA step on a bucket whose only state is its
	// theoretical arrival time (TAT, unix microseconds): with
	// base = max(TAT, Now), the step stores base + Hits×Interval (expiring
	// when the bucket is full again) if that is at most Burst×Interval past
	// Now, and otherwise changes nothing (Now, Interval and Burst are the
	// op's Bucket). After is the TAT the step found (0 if missing): the
	// engine redoes the same comparison to decide. Steps on one key are
	// applied in the order they appear in a call, so N waiters coalesced on
	// one key get the answers they would get one by one; the shard never
	// merges them.
	OpTokenBucket
	// OpReserve adds Hits and sets the TTL like OpAdd, but every backend
	// does it as one atomic operation whose After is the counter's true
	// value right after it (memcache's OpAdd reads, then increments
	// later): a lease's block is the range of counts just below After.
	OpReserve
	// OpRelease takes Hits back from a counter that still exists (never
	// below 0, TTL kept; a missing counter is left missing): a lease gives
	// back hits it reserved and did not use. After is the value after it.
	OpRelease
	// OpTokenTake is OpTokenBucket that takes as many of Hits tokens as
	// the bucket holds (TokenBucketTake) instead of all or none: a lease's
	// block of tokens.
	OpTokenTake
)

var opKindNames = [...]string{"add", "get", "token_bucket", "reserve", "release", "token_take"}

func (k OpKind) String() string {
	if int(k) < len(opKindNames) {
		return opKindNames[k]
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// CounterOp is one counter operation. It stays one flat value, not an
// interface per kind: a call's operations are a []CounterOp that the
// shards coalesce, batch and pipeline without an allocation per
// operation. What each kind carries is grouped instead, and the
// constructors (Add, Get, Reserve, Release, BucketStep, BucketTake) make
// each kind with exactly its own fields, so a reader sees the kind where
// an operation is made:
//
//	kind                       Hits  TTL  Bucket
//	OpAdd, OpReserve           yes   yes  -
//	OpGet                      -     -    -
//	OpRelease                  yes   -    -
//	OpTokenBucket, OpTokenTake yes   -    yes
//
// Validate reports an operation that carries more or less. Every kind
// has a Key and may be PerSecond. Lease is the lease layer's, set by the
// engine on a leased rule's operations: backends never read it. After is
// the answer, filled by whoever applies the operation.
type CounterOp struct {
	Key string
	// Kind is what to do; the zero value is OpAdd.
	Kind OpKind
	// PerSecond routes the operation to the per-second backend when one is
	// configured (rules with unit SECOND); backends ignore it.
	PerSecond bool
	// Hits to add, reserve, give back or take (an add of 0 reads the
	// counter and refreshes its TTL: the reference still sends INCRBY 0 +
	// EXPIRE; stop-increment mode sends every kind with 0).
	Hits uint64
	// TTL is the expiry an add or a reservation sets, from now.
	TTL time.Duration
	// Bucket is the input of a token bucket step or take.
	Bucket Bucket
	// Lease is for the lease layer only (zero for an exact operation).
	Lease LeaseTerms
	// After is filled by the backend: what the kind says it reports.
	After uint64
}

// Bucket is the input of a token bucket step (OpTokenBucket, OpTokenTake):
// the step's time Now (unix microseconds), Interval (microseconds per
// token) and Burst (tokens).
type Bucket struct {
	Now, Interval, Burst int64
}

// LeaseTerms are what the lease layer needs of a leased rule's operation
// (CountLease), beyond what the backend does with it: set by the engine,
// never read by a backend, zero on an exact operation. Kind says how a lease layer may answer the operation; Limit
// is the most a window's counter may reach in its window of UnitSec
// seconds (a bucket's burst); At is the decision's time (unix
// microseconds): a window's key names the window that time is in, and the
// lease layer reckons the window's end from it, not from its own clock
// read later. Pair links a sliding window's two operations (LeaseSliding
// and its LeaseSlidingPrev read): the engine gives both the same label,
// unique among the operations of one call, where it builds them; the
// lease layer pairs them by it (SlidingRead), never by their places.
// Limit and UnitSec are 32 bits (a limit is a rule's requests_per_unit or
// burst, a unit at most a year), so the terms take 24 bytes and a
// CounterOp 96, as before they had a struct of their own.
type LeaseTerms struct {
	Kind    LeaseKind
	Pair    uint32
	Limit   uint32
	UnitSec int32
	At      int64
}

// Add is an OpAdd: hits added to the counter at key, which expires ttl
// from now; After is the count after the add.
func Add(key string, hits uint64, ttl time.Duration) CounterOp {
	return CounterOp{Key: key, Kind: OpAdd, Hits: hits, TTL: ttl}
}

// Get is an OpGet: a read of the counter at key that changes nothing.
func Get(key string) CounterOp {
	return CounterOp{Key: key, Kind: OpGet}
}

// Reserve is an OpReserve: an atomic add of hits whose After is the
// counter's true value right after it.
func Reserve(key string, hits uint64, ttl time.Duration) CounterOp {
	return CounterOp{Key: key, Kind: OpReserve, Hits: hits, TTL: ttl}
}

// Release is an OpRelease: hits given back to the counter at key.
func Release(key string, hits uint64) CounterOp {
	return CounterOp{Key: key, Kind: OpRelease, Hits: hits}
}

// BucketStep is an OpTokenBucket: a step of hits tokens, all or none.
func BucketStep(key string, hits uint64, b Bucket) CounterOp {
	return CounterOp{Key: key, Kind: OpTokenBucket, Hits: hits, Bucket: b}
}

// BucketTake is an OpTokenTake: up to hits tokens, as many as the bucket
// holds.
func BucketTake(key string, hits uint64, b Bucket) CounterOp {
	return CounterOp{Key: key, Kind: OpTokenTake, Hits: hits, Bucket: b}
}

// OnSecondLane is op routed to the per-second backend when perSecond.
func (op CounterOp) OnSecondLane(perSecond bool) CounterOp {
	op.PerSecond = perSecond
	return op
}

// Validate reports an operation that carries a field its kind does not
// use (see CounterOp), or an unknown kind. Lease is not checked: backends
// never read it.
func (op *CounterOp) Validate() error {
	var extra []string
	switch op.Kind {
	case OpAdd, OpReserve:
		if op.Bucket != (Bucket{}) {
			extra = append(extra, "Bucket")
		}
	case OpGet:
		if op.Hits != 0 {
			extra = append(extra, "Hits")
		}
		if op.TTL != 0 {
			extra = append(extra, "TTL")
		}
		if op.Bucket != (Bucket{}) {
			extra = append(extra, "Bucket")
		}
	case OpRelease:
		if op.TTL != 0 {
			extra = append(extra, "TTL")
		}
		if op.Bucket != (Bucket{}) {
			extra = append(extra, "Bucket")
		}
	case OpTokenBucket, OpTokenTake:
		if op.TTL != 0 {
			extra = append(extra, "TTL")
		}
	default:
		return fmt.Errorf("counter op %q: %w %v", op.Key, errUnknownKind, op.Kind)
	}
	if extra != nil {
		return fmt.Errorf("counter op %q: %v carries %v, which it does not use", op.Key, op.Kind, extra)
	}
	return nil
}

var errUnknownKind = errors.New("unknown kind")
