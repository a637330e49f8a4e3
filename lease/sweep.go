package lease

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/tick"
)

// coldIdle is how long a key answered once is kept while it holds
// nothing: longer than a key with a rate worth reserving ahead for waits
// between its first two decisions.
const coldIdle = time.Second

// sweep runs until Close: every Options.Sweep it forgets what is over and
// gives back what keys hold beyond their demand.
func (c *Counter) sweep() {
	defer close(c.sweeper)
	tick.Every(c.ctx.Done(), c.o.Sweep, func() {
		now := c.o.Clock().UnixMicro()
		c.once.rotate(now)
		c.giveBack(now, false)
	})
}

// giveBack reviews every state: windows that are over are forgotten (their
// counters expire with them), tokens past their time are dropped, idle
// states are forgotten, and window counts beyond twice a key's demand over
// the horizon (all of them when idle, or when all is true) go back to the
// store in one call.
func (c *Counter) giveBack(now int64, all bool) {
	var ops []engine.CounterOp
	for i := range c.stripes {
		s := &c.stripes[i]
		s.mu.Lock()
		for k, st := range s.m {
			if op, ok := c.review(st, now, all); ok {
				ops = append(ops, op)
			}
			unused := now - st.lastUse
			// A key answered once and not again within coldIdle is a
			// cold key of a large key space: forgotten once it holds
			// nothing, so that a burst of new keys is not reviewed at
			// every sweep and kept for the collector for IdleAfter. Seen
			// again, it costs what its first decision cost: exact mode's.
			idle := unused >= c.o.IdleAfter.Microseconds() || (st.decided <= 1 && unused >= min(coldIdle, c.o.IdleAfter).Microseconds())
			ended := st.windowEnd > 0 && now >= st.windowEnd
			if !st.pending && len(st.waiters) == 0 && (ended || (idle && st.avail(now) == 0 && st.overUntil <= now)) {
				delete(s.m, k)
			}
		}
		s.mu.Unlock()
	}
	if len(ops) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.o.CallTimeout)
	defer cancel()
	if err := c.next.Apply(ctx, ops, nil); err != nil {
		c.st.errors.Inc()
		return // what was not given back stays counted: fewer admitted, never more
	}
	for i := range ops {
		if ops[i].Kind == engine.OpRelease {
			c.st.returned.Add(ops[i].Hits)
		}
	}
}

// review brings st up to date at now and returns the give-back it needs.
func (c *Counter) review(st *state, now int64, all bool) (engine.CounterOp, bool) {
	if st.kind == engine.LeaseBucket {
		// A bucket's unused tokens are not handed back: each lapses at its
		// own time, as it would have in the bucket.
		c.st.expired.Add(uint64(st.expire(now)))
		return engine.CounterOp{}, false
	}
	if st.pending || (st.windowEnd > 0 && now >= st.windowEnd) {
		return engine.CounterOp{}, false
	}
	if st.refused > 0 {
		// A sliding window's refused hits join its counter, as exact
		// counting adds them (one write for all, from their decisions).
		op := engine.Add(st.key, uint64(st.refused), st.ttl).OnSecondLane(st.perSecond)
		st.refused = 0
		st.credit--
		return op, true
	}
	// A give-back is a write: sent only from the writes this key saved, so
	// that its writes never outnumber its decisions (what is not given
	// back lapses with its window: at most the block reserved last). Most
	// states of a large key space hold nothing: they are passed over
	// before the rate's exponential (a sweep reviews every state).
	have := st.avail(now)
	if have == 0 || st.credit < 1 {
		return engine.CounterOp{}, false
	}
	keep := st.demand(now, c.o.Horizon)
	if all || now-st.lastUse >= c.o.IdleAfter.Microseconds() {
		keep = 0
	}
	if have <= 2*keep {
		return engine.CounterOp{}, false
	}
	st.credit--
	give := st.takeBack(have - keep)
	st.seen -= give
	return engine.Release(st.key, uint64(give)).OnSecondLane(st.perSecond), true
}
