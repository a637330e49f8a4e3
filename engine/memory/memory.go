package memory

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/engine"
)

type entry struct {
	n       uint64
	expires int64 // unix nanoseconds
}

// Backend holds counters in memory. It is safe for concurrent use, though the
// shard that owns it is normally its only caller (so the lock is uncontended).
type Backend struct {
	clock func() time.Time

	mu sync.Mutex
	m  map[string]entry
	// sinceSweep counts operations since the last sweep of expired counters;
	// a sweep runs once it reaches the map's size, so sweeping is amortised
	// O(1) per operation and memory stays bounded by live windows.
	sinceSweep int
}

// New returns an empty backend; clock may be nil for time.Now.
func New(clock func() time.Time) *Backend {
	if clock == nil {
		clock = time.Now
	}
	return &Backend{clock: clock, m: map[string]entry{}}
}

// IncrementBatch implements engine.Backend.
func (b *Backend) IncrementBatch(_ context.Context, batch []engine.Increment) error {
	now := b.clock().UnixNano()
	b.mu.Lock()
	for i := range batch {
		inc := &batch[i]
		e := b.m[inc.Key]
		if e.expires <= now {
			e.n = 0
		}
		switch inc.Kind {
		case engine.OpGet:
			inc.After = e.n
			continue
		case engine.OpTokenBucket:
			inc.After = e.n
			if tat, ok := engine.TokenBucketStep(int64(e.n), inc); ok && inc.Hits > 0 {
				b.m[inc.Key] = entry{n: uint64(tat), expires: now + int64(engine.TokenBucketTTL(tat, inc.Now))}
			}
			continue
		}
		e.n += inc.Hits
		e.expires = now + int64(inc.TTL)
		b.m[inc.Key] = e
		inc.After = e.n
	}
	b.sinceSweep += len(batch)
	if b.sinceSweep >= max(len(b.m), 1024) {
		b.sweep(now)
	}
	b.mu.Unlock()
	return nil
}

func (b *Backend) sweep(now int64) {
	for k, e := range b.m {
		if e.expires <= now {
			delete(b.m, k)
		}
	}
	b.sinceSweep = 0
}

// Len is the number of counters held, expired ones not yet swept included.
func (b *Backend) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}

// Inline tells the actors package that calls return at once and need no
// goroutine of their own.
func (b *Backend) Inline() bool { return true }

// Close drops every counter.
func (b *Backend) Close() error {
	b.mu.Lock()
	b.m = map[string]entry{}
	b.mu.Unlock()
	return nil
}
