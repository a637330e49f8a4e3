package h2grpc

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
)

// Deadlines. A call's deadline counts from its headers (grpc-timeout). A
// call whose deadline has passed when a worker takes it is answered
// DEADLINE_EXCEEDED without running, so its hits are not counted. In a
// batch, the method runs with the latest deadline of its calls (none if
// one has none), so that the calls that may wait are not cut short by
// those that may not; a call whose deadline passes while the batch runs
// is answered DEADLINE_EXCEEDED then, by a timer, and its result is
// dropped.

// expiredMsg is grpc-go's message for a deadline that passed.
const expiredMsg = "context deadline exceeded"

// expiryTimerSlack: a call whose deadline is within this of the batch's
// is answered when the batch context ends instead of by a timer of its
// own. A gateway gives all its calls one timeout, so a batch's deadlines
// differ by the microseconds between their headers.
const expiryTimerSlack = time.Millisecond

// batchExpiry answers the calls of a running batch whose deadlines pass
// before the batch's.
type batchExpiry struct {
	c   *conn
	sts []*stream
	end time.Time // the batch context's deadline; zero: none
	t   *time.Timer
	// over (mu): the batch is being answered; the timer does nothing.
	over bool
}

// batchDeadlines answers the calls of sts whose deadline has passed,
// returns those left to run, and the batch's context: ctx with the latest
// of their deadlines. Calls due sooner get a timer (stop it with
// batchExpiry.stopLocked once the batch returns).
func (c *conn) batchDeadlines(ctx context.Context, sts []*stream) ([]*stream, context.Context, context.CancelFunc, *batchExpiry) {
	var now, latest, earliest time.Time
	none := false
	var run []*stream // nil until a call is answered without running
	for i, st := range sts {
		if st.deadline.IsZero() {
			none = true
		} else {
			if now.IsZero() {
				now = time.Now()
			}
			if !now.Before(st.deadline) {
				if run == nil {
					run = append(make([]*stream, 0, len(sts)), sts[:i]...)
				}
				c.mu.Lock()
				c.expireLocked(st)
				c.mu.Unlock()
				continue
			}
			if st.deadline.After(latest) {
				latest = st.deadline
			}
			if earliest.IsZero() || st.deadline.Before(earliest) {
				earliest = st.deadline
			}
		}
		if run != nil {
			run = append(run, st)
		}
	}
	if run == nil {
		run = sts
	} else {
		c.mu.Lock()
		c.flushLocked()
		c.mu.Unlock()
	}
	if none {
		latest = time.Time{}
	}
	cancel := context.CancelFunc(func() {})
	if !latest.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, latest)
	}
	var e *batchExpiry
	if !earliest.IsZero() && (latest.IsZero() || earliest.Before(latest.Add(-expiryTimerSlack))) {
		e = &batchExpiry{c: c, sts: run, end: latest}
		c.mu.Lock() // fire reads e.t under mu
		e.t = time.AfterFunc(earliest.Sub(now), e.fire)
		c.mu.Unlock()
	}
	return run, ctx, cancel, e
}

// expireLocked answers st DEADLINE_EXCEEDED while its batch may still
// run: the stream stays open (and counted against MaxConcurrentStreams)
// until the batch returns.
func (c *conn) expireLocked(st *stream) {
	if !c.dead && !st.reset {
		c.out = appendHeaders(c.out, st.id, trailersOnlyFor(st, codes.DeadlineExceeded, expiredMsg), true)
		c.answers++
	}
	st.answered = true
}

// fire answers the calls that are due and waits for the next.
func (e *batchExpiry) fire() {
	c := e.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.over {
		return
	}
	now := time.Now()
	var next time.Time
	expired := false
	for _, st := range e.sts {
		switch {
		case st.answered || st.deadline.IsZero():
		case !now.Before(st.deadline):
			c.expireLocked(st)
			expired = true
		case next.IsZero() || st.deadline.Before(next):
			next = st.deadline
		}
	}
	if expired {
		c.flushWholeLocked()
	}
	if !next.IsZero() && (e.end.IsZero() || next.Before(e.end.Add(-expiryTimerSlack))) {
		e.t.Reset(next.Sub(now))
	}
}

// stopLocked ends the timer's part: the batch is answered now.
func (e *batchExpiry) stopLocked() {
	if e != nil {
		e.over = true
		e.t.Stop()
	}
}
