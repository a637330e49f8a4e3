package engine

import (
	"context"
	"fmt"
	"time"
)

// OpKind says what a backend does with one Increment.
type OpKind uint8

const (
	// OpIncrement adds Hits and sets the TTL (Redis INCRBY + EXPIRE); After is the new value.
	OpIncrement OpKind = iota
	// OpGet reads the counter without changing it or its TTL (Redis GET); After is the value, 0 if missing.
	OpGet
)

// String names the kind for messages.
func (k OpKind) String() string {
	switch k {
	case OpIncrement:
		return "increment"
	case OpGet:
		return "get"
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Increment is one counter operation. With Kind OpIncrement (the zero value):
// add Hits to the counter at Key, set its expiry to TTL from now, and report
// the count after the add in After. Hits may be 0, which reads the counter
// without changing it (the reference still sends INCRBY 0 + EXPIRE, so the
// key's TTL is refreshed). With Kind OpGet, Hits and TTL are ignored.
type Increment struct {
	Key  string
	Hits uint64
	TTL  time.Duration
	// Kind is the operation; the zero value increments.
	Kind OpKind
	// PerSecond routes the increment to the per-second backend when one is
	// configured (rules with unit SECOND); backends ignore it.
	PerSecond bool
	// After is filled by the backend: the counter's value once Hits is added.
	After uint64
}

// Backend stores the counters. Batches arrive from one shard at a time with
// unique (key, kind) pairs (the shard has already coalesced equal ones), so a
// backend can send a whole batch as one pipelined round trip. A key may appear
// once per kind; the backend applies the operations in batch order. A backend
// rejects a kind it does not know with an error, never by guessing.
type Backend interface {
	// IncrementBatch applies every increment of the batch and fills After.
	// An error fails the whole batch; it is returned to every waiter.
	IncrementBatch(ctx context.Context, batch []Increment) error
	// Close releases connections. The backend is not used after Close.
	Close() error
}

// KeyValidator is implemented by backends that cannot store every key (memcache:
// at most 250 bytes, no whitespace or control characters). The engine asks
// before a key joins a batch, so one bad key fails its own request only.
type KeyValidator interface {
	ValidateKey(key string) error
}

// HealthReporter is implemented by backends whose health can change at run time
// (for example a Redis client that has lost every connection).
type HealthReporter interface {
	Healthy() bool
}
