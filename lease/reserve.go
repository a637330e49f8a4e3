package lease

import (
	"context"
	"math"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// reserve starts st's reservation, sized for the hits its waiters want
// and the demand st has seen (under st's stripe lock); see send for out.
func (c *Counter) reserve(st *state, now int64, out *[]resv) {
	c.send(st, c.size(st, int64(min(st.waiting(), 1<<62)), now), now, out)
}

// flush adds a sliding window's refused hits to its counter now (a
// reservation of no hits that carries them), for a window that ends
// before the sweeper would add them.
func (c *Counter) flush(st *state, now int64, out *[]resv) {
	if st.refused > 0 && !st.pending && now < st.windowEnd && st.windowEnd-now <= c.o.Sweep.Microseconds()+4*c.rtt.Load() {
		c.send(st, 0, now, out)
	}
}

// resv is a reservation started and not yet sent: its key's state and
// its operations, the reservation itself (resvOp) and, for a sliding
// window, its read of the previous window (resvRead). They are the lease
// layer's own, made and read here only.
type resv struct {
	st  *state
	ops []engine.CounterOp
}

const (
	resvOp   = 0
	resvRead = 1
)

// send starts st's reservation of n hits (with the refused hits it
// carries), under st's stripe lock. With out, the reservation is added
// there, for the caller to send with the others of its batch in one call
// (launch): a burst of cold keys then costs the calls exact mode's batch
// costs, not a call, a goroutine and a timer per key. The first one added
// counts the call in flight here, under the lock, so that Close waits for
// it.
func (c *Counter) send(st *state, n, now int64, out *[]resv) {
	if n > 0 {
		st.size = n
	}
	// What the reservation takes beyond the hits already waiting serves
	// decisions that arrive while it is in flight; the rest go direct.
	st.spare = max(n-int64(min(st.waiting(), 1<<62)), 0)
	st.pending = true
	st.flying = n + st.refused
	st.credit--
	st.carried, st.refused = st.refused, 0
	// A sliding window's reservation is followed by its read of the
	// previous window: file takes them as resvOp and resvRead.
	ops := make([]engine.CounterOp, 1, 2)
	if st.kind == engine.LeaseBucket {
		b := engine.Bucket{Now: now, Interval: st.interval, Burst: st.burst}
		ops[resvOp] = engine.BucketTake(st.key, uint64(n), b).OnSecondLane(st.perSecond)
	} else {
		ops[resvOp] = engine.Reserve(st.key, uint64(n+st.carried), st.ttl).OnSecondLane(st.perSecond)
		if st.kind == engine.LeaseSliding {
			ops = append(ops, engine.Get(st.prevKey).OnSecondLane(st.perSecond))
		}
	}
	c.st.reservations.Inc()
	if out != nil {
		if len(*out) == 0 {
			c.calls.Add(1)
		}
		*out = append(*out, resv{st, ops})
		return
	}
	c.calls.Add(1)
	go c.call([]resv{{st, ops}}, nil)
}

// launch sends the reservations collected in rs (counted in flight by
// send) in one call, which closes batch as it sends; with none, batch is
// closed here.
func (c *Counter) launch(rs []resv, batch engine.Batch) {
	if len(rs) == 0 {
		if batch != nil {
			batch.Close()
		}
		return
	}
	go c.call(rs, batch)
}

// size is the next reservation's size. What is reserved ahead of need is
// the key's demand over the horizon (at most 4 times the last size) within
// the window's time left, a share of the headroom last seen and a share of
// the limit: it may never be used. The hits of decisions already waiting
// (need) are used as soon as the reservation returns, so they are capped by
// the headroom share alone: a burst on one key costs a few round trips, as
// in exact mode, instead of one per 1/BlockShare of the limit. MaxBlock
// caps both.
func (c *Counter) size(st *state, need int64, now int64) int64 {
	n := st.demand(now, c.o.Horizon)
	if st.size > 0 {
		n = min(n, 4*st.size)
	} else {
		n = max(n, int64(c.o.FirstBlock))
	}
	if st.windowEnd > 0 && st.rate > 0 {
		// No more than the key will use before its window ends (once its
		// rate is known at all).
		left := time.Duration(st.windowEnd-now) * time.Microsecond
		n = min(n, max(st.demand(now, left), 1))
	}
	n = max(n, 1)
	if st.slid {
		n = 0 // only what waits: no counts the counter holds without a decision
	}
	var head int64
	if st.kind == engine.LeaseBucket {
		head = (now + st.burst*st.interval - max(st.seen, now)) / max(st.interval, 1)
	} else {
		head = st.limitAt(now) - st.seen
	}
	limit := int64(min(st.limit, 1<<62))
	if st.kind == engine.LeaseBucket {
		limit = st.burst
	}
	share := max(head/int64(c.o.HeadroomShare), 1)
	n = min(n, share, max(limit/int64(c.o.BlockShare), 1), int64(c.o.MaxBlock))
	// Decisions waiting now are demand that exists: they may take up to the
	// headroom share; the block share and the horizon bound what is held
	// ahead of demand.
	n = max(n, min(need, share, int64(c.o.MaxBlock)))
	// The first waiter's hits in one block, or it could never be served.
	if len(st.waiters) > 0 {
		n = max(n, int64(min(st.waiters[0].op.Hits, 1<<62)))
	}
	return n
}

// call runs reservations in one call to the next Counter (which closes
// batch, if any, as it sends them) and files what each got into its state.
func (c *Counter) call(rs []resv, batch engine.Batch) {
	defer c.calls.Done()
	ops := rs[0].ops
	if len(rs) > 1 {
		ops = make([]engine.CounterOp, 0, 2*len(rs))
		for _, r := range rs {
			ops = append(ops, r.ops...)
		}
	}
	ctx, cancel := c.ctx, context.CancelFunc(nil)
	if wb, ok := c.next.(engine.WaitBounder); !ok || wb.WaitBound() > c.o.CallTimeout {
		// The next Counter does not bound the call within CallTimeout
		// itself (a Router does: a context and a timer fewer per call).
		ctx, cancel = context.WithTimeout(c.ctx, c.o.CallTimeout)
	}
	began := time.Now()
	err := c.next.Apply(ctx, ops, batch)
	if cancel != nil {
		cancel()
	}
	if err == nil {
		took := time.Since(began).Microseconds()
		c.rtt.Store((3*c.rtt.Load() + took) / 4)
	}
	if len(rs) > 1 {
		i := 0
		for _, r := range rs {
			i += copy(r.ops, ops[i:i+len(r.ops)])
		}
	}
	for _, r := range rs {
		c.filed(r.st, r.ops, err)
	}
}

// filed takes one reservation's answer (or err) into st and serves its
// waiters.
func (c *Counter) filed(st *state, ops []engine.CounterOp, err error) {
	s := c.stripe(st.key)
	s.mu.Lock()
	defer s.mu.Unlock()
	st.pending, st.spare, st.flying = false, 0, 0
	now := c.o.Clock().UnixMicro()
	if err != nil {
		c.st.errors.Inc()
		// The refused hits may or may not have been added: counted again,
		// fewer are admitted, never more.
		st.refused += st.carried
		st.carried = 0
		st.serve(now, err)
		return
	}
	c.file(st, ops, now)
	st.serve(now, nil)
	switch {
	case len(st.waiters) == 0:
		// Decisions that arrive together all wait for this reservation
		// and never take the answer-at-once path that reserves ahead:
		// reserve ahead here too, or a key whose decisions come in bursts
		// waits a round trip every time.
		c.ahead(st, now, nil)
	case c.ctx.Err() != nil:
		st.serve(now, ErrClosed)
	default:
		c.reserve(st, now, nil)
	}
}

// file adds a reservation's answer to st: the counts (or tokens) it owns
// now, and, when it came back short, how long the key is over.
func (c *Counter) file(st *state, ops []engine.CounterOp, now int64) {
	op := &ops[resvOp]
	n := int64(op.Hits)
	if st.kind == engine.LeaseBucket {
		found := int64(min(op.After, 1<<62))
		next, took := engine.TokenBucketTake(found, op)
		base := max(found, op.Bucket.Now)
		if took > 0 {
			st.spans = append(st.spans, span{base + st.interval, next})
			c.st.reserved.Add(took)
			st.seen = next
		} else {
			st.seen = found
		}
		if int64(took) < n {
			// One more token fits once the TAT is within burst of the clock.
			st.overUntil = max(st.seen+st.interval-st.burst*st.interval, now+1)
		}
		return
	}
	if st.kind == engine.LeaseSliding {
		st.prev = ops[resvRead].After
	}
	n -= st.carried // the refused hits it carried sit below the block
	st.carried = 0
	after := int64(min(op.After, 1<<62))
	base := after - n
	g := min(max(st.limitAt(now)-base, 0), n)
	if g > 0 {
		st.spans = append(st.spans, span{base + 1, base + g})
		c.st.reserved.Add(uint64(g))
	}
	st.seen = max(st.seen, after) // a direct reservation may have seen more
	st.absorb += n - g
	if g < n {
		st.over(now)
	}
}

// over marks a window's state over: a reservation (or a direct decision)
// found the counter past what the limit lets it grant.
func (st *state) over(now int64) {
	st.slid = st.kind == engine.LeaseSliding
	// A fixed window's counter only grows until the window ends, and its
	// key names that window alone: the key is over for good, also for
	// decisions of the window still arriving after it ended, which are
	// answered from this reservation, as exact counting answers them from
	// its last INCRBY (no reservation is sent again for a window that
	// ended).
	st.overUntil = math.MaxInt64
	if st.kind == engine.LeaseSliding {
		st.overUntil = max(st.slidingClear(), now+1)
	}
}

// settle files what a direct decision's reservation of its own hits found
// into its key's state: the counter as seen, the hits used (the engine
// judges the decision from the count, as exact counting does), and
// whether the window is over. A cold key's state is made now if it is
// over, or seen before (a fixed window seen once within its limit is only
// marked in the once set). A cold key's first decision thus costs exact
// mode's one write and holds nothing; its next reservations follow its
// rate. cold: the decision found no state (its
// hits are not among the state's direct hits in flight); ok: the call
// succeeded. Reservations it starts ahead go to out.
func (c *Counter) settle(op, prev *engine.CounterOp, hash uint64, cold, ok bool, out *[]resv) {
	s := &c.stripes[hash%stripes]
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.m[op.Key]
	h, after := int64(min(op.Hits, 1<<62)), int64(min(op.After, 1<<62))
	if st != nil && !cold {
		st.direct = max(st.direct-h, 0)
	}
	if !ok {
		return // the call failed: the decision gets its error
	}
	c.st.reservations.Inc()
	c.st.waited.Inc()
	if st == nil && op.Lease.Kind == engine.LeaseWindow && op.After <= uint64(op.Lease.Limit) && !c.once.seen(hash) {
		// A fixed window within its limit, seen once: remembered in the
		// once set only; its state is made at its next decision.
		c.st.reserved.Add(uint64(h))
		return
	}
	now := c.o.Clock().UnixMicro()
	if st == nil {
		st = newState(op, prev, now)
		s.m[op.Key] = st
	}
	st.retune(op)
	if prev != nil {
		st.prev = prev.After
	}
	st.seen = max(st.seen, after)
	if min(max(st.limitAt(now)-(after-h), 0), h) < h {
		st.over(now)
	} else {
		st.used += h
		c.st.reserved.Add(uint64(h))
	}
	st.decided++ // and one write: no credit
	st.lastUse = now
	c.ahead(st, now, out)
}
