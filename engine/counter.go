package engine

import (
	"context"
	"time"
)

// Counter applies counter operations. The actors package implements it by
// gathering the operations of many decisions into one backend call per
// shard; DirectCounter hands each decision's to a backend by itself.
type Counter interface {
	// Apply fills After of every op, or fails them all. batch, when not
	// nil, is the open batch whose last operations ops are: the counter
	// closes it as soon as they are sent, before it waits for their
	// answers, so that what the batch held leaves with them. Once Apply
	// has returned, also with an error (a context done, a timeout) while
	// the operations' call is still out, ops are the caller's alone: no
	// late answer is written into them.
	Apply(ctx context.Context, ops []CounterOp, batch Batch) error
}

// Batch is an open batch: requests read together (the calls one read of
// a gRPC connection brought) whose counter operations are on their way.
// While a batch is open, a counter with network calls holds its calls for
// it (for a bounded time), so that the operations of batches read at about
// the same moment share one call. The one who opens a batch closes it once
// the batch is decided; the counter closes it earlier, as its operations
// are sent (Counter.Apply). Close may be called more than once.
type Batch interface{ Close() }

// closeBatch closes b, if any.
func closeBatch(b Batch) {
	if b != nil {
		b.Close()
	}
}

// DirectCounter is a Counter that sends each decision's operations straight
// to its Backend, one call per decision. It suits callers with nothing to
// gather (the OData API's in-process limiter: one request is one key) and
// tests that need the engine without the actors layer.
type DirectCounter struct{ Backend Backend }

// Apply runs ops as one backend call; it holds nothing, so it closes batch
// first.
func (c DirectCounter) Apply(ctx context.Context, ops []CounterOp, batch Batch) error {
	closeBatch(batch)
	return c.Backend.Exec(ctx, ops)
}

// WaitBounder is implemented by Counters that answer every Apply within
// WaitBound by themselves; the engine then sets no deadline of its own when
// that bound is within its Timeout (a timer and a context fewer per decision).
type WaitBounder interface {
	WaitBound() time.Duration
}

// OverLimitCache remembers keys that went over their limit, until their window
// ends, so they are answered without a backend call (LOCAL_CACHE_SIZE_IN_BYTES).
type OverLimitCache interface {
	Contains(key string) bool
	Add(key string, ttl time.Duration)
}
