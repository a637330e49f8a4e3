package actors

import (
	"context"
	"sync"
	"sync/atomic"
)

// A Cohort is decisions that arrived together: the requests a gRPC server
// read from one connection in one go. Their increments wait, unsent, at
// their shards until every member has sent its own or left without any, so
// that they share backend calls and come back together, ready to be
// answered in one write to the client. Without it, the first request's
// increment leaves alone, the others wait for its round trip, and each
// answer costs the client connection a write of its own.
//
// A cohort is complete once every member has sent its increments or its
// method has returned without sending any: for the rate limit call, the
// time its members take to decode and match requests already read.
// Decisions outside the cohort that reach a held shard wait too. A call
// returning sends everything pending, hold or not, and a shard that
// cohorts keep holding (those of many connections may overlap without a
// gap for as long as load lasts) sends with the first message that finds
// it held for longer than Options.CohortHold. Only routers with a network
// lane hold: an inline backend answers at once anyway.
type Cohort struct {
	mu      sync.Mutex
	left    int // members that have neither sent nor left
	members []member
	// r and held are set by the members that sent held increments: each
	// entry of held is one held message to that shard, released once the
	// last member is in.
	r    *Router
	held []int
}

type member struct {
	c    *Cohort
	gone atomic.Bool // sent its increments or left
}

type cohortKey struct{}

// NewCohort returns a cohort of n members, numbered 0 to n-1.
func NewCohort(n int) *Cohort {
	c := &Cohort{left: n, members: make([]member, n), held: make([]int, 0, n)}
	for i := range c.members {
		c.members[i].c = c
	}
	return c
}

// Join returns the context member i decides with: increments sent with it
// are held until the cohort is complete.
func (c *Cohort) Join(ctx context.Context, i int) context.Context {
	return context.WithValue(ctx, cohortKey{}, &c.members[i])
}

// Leave tells the cohort that member i is done: its decision has returned,
// whether or not it sent increments. Leaving twice, or after sending, is
// harmless.
func (c *Cohort) Leave(i int) { c.members[i].leave() }

// memberOf claims the member ctx carries, if it has neither sent nor left:
// only one Increment per member is held, even if a caller sent two at once.
func memberOf(ctx context.Context) *member {
	m, _ := ctx.Value(cohortKey{}).(*member)
	if m == nil || !m.gone.CompareAndSwap(false, true) {
		return nil
	}
	return m
}

func (m *member) leave() {
	if !m.gone.Swap(true) {
		m.c.in(nil, nil)
	}
}

// in counts one more member in, with the shards at which it held one
// message each (none if it left without sending); the last one in releases
// what the cohort held.
func (c *Cohort) in(r *Router, shards []int) {
	c.mu.Lock()
	if len(shards) > 0 {
		c.r = r
		c.held = append(c.held, shards...)
	}
	c.left--
	last := c.left == 0
	r, held := c.r, c.held
	c.mu.Unlock()
	if last && r != nil {
		r.release(held)
	}
}

// releaseMsg lets a shard send what one held message left waiting.
type releaseMsg struct{}
