package odata

import (
	"context"
	"sync"
	"time"
)

// RateLimiter decides whether a caller (an API key id, or "origin:<origin>"
// for browsers) may make one more request now. When not, retryAfter says
// how long until it may.
type RateLimiter interface {
	Allow(ctx context.Context, key string) (ok bool, retryAfter time.Duration, err error)
}

// leases is the "no parallel requests" rule: at most one request in flight
// per caller. The rate limit service has no primitive for it (its counters
// only grow within a window), so it lives here, per process; with several
// replicas behind a balancer a caller may have one request in flight on
// each.
type leases struct {
	mu   sync.Mutex
	held map[string]struct{}
}

func newLeases() *leases { return &leases{held: map[string]struct{}{}} }

// acquire takes the caller's lease; false when it is already held.
func (l *leases) acquire(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, busy := l.held[key]; busy {
		return false
	}
	l.held[key] = struct{}{}
	return true
}

func (l *leases) release(key string) {
	l.mu.Lock()
	delete(l.held, key)
	l.mu.Unlock()
}
