package engine

import (
	"context"
	"time"
)

// OpKind says what a backend does with one CounterOp.
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
	// Now, and otherwise changes nothing. After is the TAT the step found
	// (0 if missing): the engine redoes the same comparison to decide.
	// Steps on one key are applied in the order they appear in a call, so
	// N waiters coalesced on one key get the answers they would get one by
	// one; the shard never merges them.
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

// CounterOp is one counter operation, as Kind says: an add (OpAdd: add Hits
// to the counter at Key, set its expiry to TTL from now, and report the
// count after the add in After), a read (OpGet) or a token bucket step
// (OpTokenBucket). An add of 0 hits reads the counter and refreshes its TTL
// (the reference still sends INCRBY 0 + EXPIRE).
type CounterOp struct {
	Key  string
	Hits uint64
	TTL  time.Duration
	// PerSecond routes the operation to the per-second backend when one is
	// configured (rules with unit SECOND); backends ignore it.
	PerSecond bool
	// Kind is what to do; the zero value is OpAdd.
	Kind OpKind
	// Now (unix microseconds), Interval (microseconds per token) and Burst
	// (tokens) are the inputs of an OpTokenBucket step; other kinds ignore
	// them. A leased window's operation (LeaseWindow, LeaseSliding) carries
	// the decision's time in Now, for the lease layer.
	Now      int64
	Interval int64
	Burst    int64
	// Lease, Limit and UnitSec are set by the engine on the operations of
	// a rule that counts by lease (CountLease); backends ignore them.
	Lease   LeaseKind
	Limit   uint64
	UnitSec int64
	// After is filled by the backend: the counter's value once Hits is added.
	After uint64
}

// TokenBucketStep applies one OpTokenBucket step to the stored TAT (0 when
// missing) and returns the TAT to store, or ok false when the step is
// refused and nothing changes. Every backend uses it (the Redis script does
// the same arithmetic), so they all decide alike.
func TokenBucketStep(tat int64, op *CounterOp) (next int64, ok bool) {
	if op.Hits > uint64(op.Burst) {
		return tat, false // never fits; also keeps Hits×Interval from overflowing
	}
	base := max(tat, op.Now)
	next = base + int64(op.Hits)*op.Interval
	if next-op.Now > op.Burst*op.Interval {
		return tat, false
	}
	return next, true
}

// TokenBucketTake applies one OpTokenTake step to the stored TAT: it takes
// as many of op.Hits tokens as the bucket holds at op.Now and returns the
// TAT to store and how many it took (0: nothing changes).
func TokenBucketTake(tat int64, op *CounterOp) (next int64, took uint64) {
	if op.Interval <= 0 || op.Burst <= 0 {
		return tat, 0
	}
	base := max(tat, op.Now)
	room := op.Now + op.Burst*op.Interval - base
	if room < op.Interval {
		return tat, 0
	}
	took = min(op.Hits, uint64(room/op.Interval))
	return base + int64(took)*op.Interval, took
}

// TokenBucketTTL is how long a bucket's TAT must be kept: until the bucket
// is full again (a missing key reads as a full bucket), plus a margin for
// clocks that differ between replicas and the store (an expired TAT would
// refill the bucket early; a kept one that is past costs nothing).
func TokenBucketTTL(tat, now int64) time.Duration {
	return time.Duration(max(tat-now, 0))*time.Microsecond + bucketTTLMargin
}

const bucketTTLMargin = time.Minute

// CeilSeconds is d in whole seconds, rounded up: the stores keep expiries in
// seconds and a counter must never expire before its window ends; a reset
// header tells when a client may try again, never earlier.
func CeilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// Backend stores the counters. Each Exec is one call: operations arrive
// from one shard at a time with unique (key, kind) pairs, except
// OpTokenBucket steps, which the shard never merges and a backend applies
// in order; so a backend can send a whole call as one pipelined round trip.
type Backend interface {
	// Exec applies every operation of the call and fills After.
	// An error fails the whole call; it is returned to every waiter.
	Exec(ctx context.Context, ops []CounterOp) error
	// Close releases connections. The backend is not used after Close.
	Close() error
}

// KeyValidator is implemented by backends that cannot store every key (memcache:
// at most 250 bytes, no whitespace or control characters). The engine asks
// before a key joins a call, so one bad key fails its own request only.
type KeyValidator interface {
	ValidateKey(key string) error
}

// HealthReporter is implemented by backends whose health can change at run time
// (for example a Redis client that has lost every connection).
type HealthReporter interface {
	Healthy() bool
}
