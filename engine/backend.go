package engine

import (
	"context"
	"time"
)

// TokenBucketStep applies one OpTokenBucket step to the stored TAT (0 when
// missing) and returns the TAT to store, or ok false when the step is
// refused and nothing changes. Every backend uses it (the Redis script does
// the same arithmetic), so they all decide alike.
func TokenBucketStep(tat int64, op *CounterOp) (next int64, ok bool) {
	b := &op.Bucket
	if op.Hits > uint64(b.Burst) {
		return tat, false // never fits; also keeps Hits×Interval from overflowing
	}
	base := max(tat, b.Now)
	next = base + int64(op.Hits)*b.Interval
	if next-b.Now > b.Burst*b.Interval {
		return tat, false
	}
	return next, true
}

// TokenBucketTake applies one OpTokenTake step to the stored TAT: it takes
// as many of op.Hits tokens as the bucket holds at op.Bucket.Now and
// returns the TAT to store and how many it took (0: nothing changes).
func TokenBucketTake(tat int64, op *CounterOp) (next int64, took uint64) {
	b := &op.Bucket
	if b.Interval <= 0 || b.Burst <= 0 {
		return tat, 0
	}
	base := max(tat, b.Now)
	room := b.Now + b.Burst*b.Interval - base
	if room < b.Interval {
		return tat, 0
	}
	took = min(op.Hits, uint64(room/b.Interval))
	return base + int64(took)*b.Interval, took
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
