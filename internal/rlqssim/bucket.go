package rlqssim

import (
	"errors"
	"fmt"
	"time"
)

// State is where a tracked bucket is in the filter's life cycle.
type State int

const (
	// NoAssignment: subscribed, no assignment in force; the
	// no_assignment_behavior decides.
	NoAssignment State = iota
	// Active: an assignment within its TTL decides.
	Active
	// Expired: the TTL passed without renewal; the
	// expired_assignment_behavior decides until its timeout.
	Expired
)

func (s State) String() string {
	switch s {
	case NoAssignment:
		return "no-assignment"
	case Active:
		return "active"
	case Expired:
		return "expired"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// ExpiredBehavior is the filter's expired_assignment_behavior: Fallback
// (nil: reuse_last_assignment) for Timeout after the TTL ends. A zero
// Timeout is the proto's default: straight to no-assignment.
type ExpiredBehavior struct {
	Fallback *Strategy
	Timeout  time.Duration
}

// Validate refuses a negative timeout or an invalid fallback.
func (e *ExpiredBehavior) Validate() error {
	if e == nil {
		return nil
	}
	if e.Timeout < 0 {
		return errors.New("expired behaviour: negative timeout")
	}
	if e.Fallback != nil {
		if err := e.Fallback.Validate(); err != nil {
			return fmt.Errorf("expired behaviour fallback: %w", err)
		}
	}
	return nil
}

// behaviours are a bucket's settings (RateLimitQuotaBucketSettings).
type behaviours struct {
	noAssignment Strategy
	expired      *ExpiredBehavior
}

// bucket is one BucketId tracked by one Envoy's filter. Transitions in
// time (TTL end, expired timeout) are applied lazily by advance, at the
// instant they were due, so a test can drive it with any clock.
type bucket struct {
	state State
	// last is the last assignment received; reuse tells whether lim is
	// still its limiter (active, or expired with reuse_last_assignment).
	last       received
	reuse      bool
	lim        *limiter
	expiresAt  time.Time // of the active assignment
	expiredEnd time.Time // of the expired behaviour

	allowed, denied uint64 // since the last report
	lastReport      time.Time
}

func newBucket(bh behaviours, now time.Time) *bucket {
	return &bucket{state: NoAssignment, lim: newLimiter(bh.noAssignment, now), lastReport: now}
}

func (b *bucket) toNoAssignment(bh behaviours, at time.Time) {
	b.state, b.reuse = NoAssignment, false
	b.lim = newLimiter(bh.noAssignment, at)
}

// advance applies the transitions due by now.
func (b *bucket) advance(bh behaviours, now time.Time) {
	if b.state == Active && !now.Before(b.expiresAt) {
		if e := bh.expired; e != nil && e.Timeout > 0 {
			b.state, b.expiredEnd = Expired, b.expiresAt.Add(e.Timeout)
			if e.Fallback != nil {
				b.lim, b.reuse = newLimiter(*e.Fallback, b.expiresAt), false
			}
		} else {
			b.toNoAssignment(bh, b.expiresAt)
		}
	}
	if b.state == Expired && !now.Before(b.expiredEnd) {
		b.toNoAssignment(bh, b.expiredEnd)
	}
}

// admit decides one request and counts it for the next report.
func (b *bucket) admit(bh behaviours, now time.Time) bool {
	b.advance(bh, now)
	ok := b.lim.allow(now)
	if ok {
		b.allowed++
	} else {
		b.denied++
	}
	return ok
}

// assign applies a quota assignment: an equal token bucket in force keeps
// its tokens and only gets the new TTL; anything else starts anew (full).
func (b *bucket) assign(bh behaviours, r received, ttl time.Duration, now time.Time) {
	b.advance(bh, now)
	keep := b.reuse && b.last.sameBucket(r)
	if !keep {
		b.lim = newLimiter(r.Strategy, now)
	}
	b.state, b.last, b.reuse = Active, r, true
	b.expiresAt = now.Add(ttl.Truncate(time.Second))
}

// takeReport returns the counts since the last report and the time since
// it, truncated to whole seconds as Envoy fills time_elapsed, and resets
// them.
func (b *bucket) takeReport(now time.Time) (allowed, denied uint64, elapsed time.Duration) {
	allowed, denied = b.allowed, b.denied
	elapsed = now.Sub(b.lastReport).Truncate(time.Second)
	if elapsed < 0 {
		elapsed = 0
	}
	b.allowed, b.denied, b.lastReport = 0, 0, now
	return allowed, denied, elapsed
}

// BucketView is what a simulated filter holds for a bucket, for tests and
// debugging.
type BucketView struct {
	Tracked   bool
	State     State
	Enforcing Strategy  // the strategy deciding requests now
	ExpiresAt time.Time // of the last assignment (zero before any)
}

func (b *bucket) view(bh behaviours, now time.Time) BucketView {
	b.advance(bh, now)
	return BucketView{Tracked: true, State: b.state, Enforcing: b.lim.s, ExpiresAt: b.expiresAt}
}
