package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/stats"
)

// Options configure a Counter.
type Options struct {
	// Horizon is how much of a key's observed demand on this replica one
	// reservation covers. Longer means fewer store calls per decision and
	// more held back from other replicas (given back when demand drops).
	Horizon time.Duration
	// HeadroomShare: one reservation takes at most 1/HeadroomShare of what
	// the key had left when last seen, so blocks shrink to single hits near
	// the limit.
	HeadroomShare uint64
	// BlockShare: what one reservation takes ahead of demand is at most
	// 1/BlockShare of the limit (a bucket's burst); the hits of decisions
	// already waiting are not held, they are used at once. What a replica
	// holds and never uses is lost to the others until it is given back;
	// this bounds it when a replica's demand stops as the limit is reached.
	BlockShare uint64
	// MaxBlock caps one reservation, in hits.
	MaxBlock uint64
	// FirstBlock is the least a key's first reservation takes, before its
	// rate is known (the caps still apply; the hits of the decisions
	// waiting are always taken). A window key's first decisions do not
	// reserve ahead at all: they go direct, each a reservation of its own
	// hits (a key seen once costs one write, as in exact mode, and holds
	// nothing: most keys of a large key space are seen once per window);
	// this sizes the reservation after them, and a bucket's first one.
	// The default, 1, sizes it to the request; later ones follow the rate.
	FirstBlock uint64
	// Sweep is how often rates are updated and unused hits given back.
	Sweep time.Duration
	// IdleAfter: a key without decisions for this long gives back all it holds.
	IdleAfter time.Duration
	// CallTimeout bounds one reservation or give-back call.
	CallTimeout time.Duration
	Clock       func() time.Time
	Stats       *stats.Store
}

// DefaultOptions are the settings SLUICE_LEASE_* start from.
func DefaultOptions() Options {
	return Options{Horizon: 2 * time.Second, HeadroomShare: 4, BlockShare: 1000, MaxBlock: 1 << 20, FirstBlock: 1,
		Sweep: 250 * time.Millisecond, IdleAfter: 5 * time.Second, CallTimeout: time.Second}
}

// EnsureDefaults fills the fields left zero and returns o.
func (o *Options) EnsureDefaults() *Options {
	d := DefaultOptions()
	if o.Horizon == 0 {
		o.Horizon = d.Horizon
	}
	if o.HeadroomShare == 0 {
		o.HeadroomShare = d.HeadroomShare
	}
	if o.BlockShare == 0 {
		o.BlockShare = d.BlockShare
	}
	if o.MaxBlock == 0 {
		o.MaxBlock = d.MaxBlock
	}
	if o.FirstBlock == 0 {
		o.FirstBlock = d.FirstBlock
	}
	if o.Sweep == 0 {
		o.Sweep = d.Sweep
	}
	if o.IdleAfter == 0 {
		o.IdleAfter = d.IdleAfter
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = d.CallTimeout
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Stats == nil {
		o.Stats = stats.NewStore()
	}
	return o
}

// Validate reports the first setting that cannot work.
func (o Options) Validate() error {
	switch {
	case o.Horizon < 0 || o.Sweep < 0 || o.IdleAfter < 0 || o.CallTimeout < 0:
		return fmt.Errorf("lease: horizon (%v), sweep (%v), idle (%v) and call timeout (%v) must not be negative",
			o.Horizon, o.Sweep, o.IdleAfter, o.CallTimeout)
	case o.MaxBlock > 1<<62:
		return fmt.Errorf("lease: max block %d is too large", o.MaxBlock)
	}
	return nil
}

// ErrClosed answers decisions that need a reservation after Close.
var ErrClosed = errors.New("lease: shutting down")

// stripes spreads the lock of the states; a power of two.
const stripes = 64

// Counter is an engine.Counter that answers leased operations from
// reservations and passes every other operation to the next Counter, which
// also carries the reservations (so they are batched like any operation).
type Counter struct {
	next    engine.Counter
	o       Options
	stripes [stripes]stripe
	ctx     context.Context
	cancel  context.CancelFunc
	calls   sync.WaitGroup // reservations in flight
	sweeper chan struct{}  // closed when the sweeper has stopped
	closeMu sync.Once

	st counters
	// rtt is the mean time a reservation takes (µs, a moving average):
	// the next one is started at least a few of them before a key runs out.
	rtt atomic.Int64
	// once: the window keys answered once, which have no state.
	once onceSet
}

type stripe struct {
	mu sync.Mutex
	m  map[string]*state
}

// counters are the lease statistics.
type counters struct {
	reservations, reserved, returned, local, waited, expired, errors *stats.Counter
}

// New returns a Counter in front of next, with its sweeper running until Close.
func New(next engine.Counter, o Options) (*Counter, error) {
	if err := o.EnsureDefaults().Validate(); err != nil {
		return nil, err
	}
	c := &Counter{next: next, o: o, sweeper: make(chan struct{})}
	c.once.init()
	for i := range c.stripes {
		c.stripes[i].m = map[string]*state{}
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	p, s := "ratelimit.lease.", o.Stats
	c.st = counters{reservations: s.Counter(p + "reservations"), reserved: s.Counter(p + "reserved_hits"),
		returned: s.Counter(p + "returned_hits"), local: s.Counter(p + "local_decisions"),
		waited: s.Counter(p + "waited_decisions"), expired: s.Counter(p + "expired_tokens"),
		errors: s.Counter(p + "reservation_errors")}
	go c.sweep()
	return c, nil
}

func (c *Counter) stripe(key string) *stripe {
	return &c.stripes[xxhash.Sum64String(key)%stripes]
}

// Apply answers ops: the leased ones here, the others through the next Counter.
func (c *Counter) Apply(ctx context.Context, ops []engine.CounterOp, batch engine.Batch) error {
	leased, err := unleaseReads(ops)
	if err != nil {
		if batch != nil {
			batch.Close()
		}
		return err
	}
	if leased == 0 {
		return c.next.Apply(ctx, ops, batch)
	}
	// Answer what can be answered at once, and queue the rest on their
	// keys, so that the reservations of a batch's keys are all in flight
	// together (one round trip for the batch, not one per key). A decision
	// that no reservation would serve within one round trip goes to the
	// store with the batch's exact operations: a reservation of its own
	// hits (see direct).
	var waiters []*waiter
	var rs []resv
	var buf [4]directOp
	directs := buf[:0]
	for i := range ops {
		var prev *engine.CounterOp
		switch ops[i].Lease.Kind {
		case engine.LeaseNone, engine.LeaseSlidingPrev:
			continue
		case engine.LeaseSliding:
			if prev, err = engine.SlidingRead(ops, i); err != nil {
				c.launch(rs, batch)
				return err
			}
		}
		hash := xxhash.Sum64String(ops[i].Key)
		w, d, err := c.try(&ops[i], prev, hash, &rs)
		if err != nil {
			c.launch(rs, batch)
			return err
		}
		switch {
		case d != notDirect:
			directs = append(directs, directOp{i, prev, ops[i].Lease.Kind, d == cold, hash})
		case w != nil:
			waiters = append(waiters, w)
		}
	}
	if len(directs) > 0 || leased < len(ops) {
		// The batch's exact operations and direct reservations take the
		// open batch, as exact mode's would; reservations for waiters
		// leave beside them, in the same round trip.
		c.launch(rs, nil)
		err := c.applyDirect(ctx, ops, directs, batch)
		return errors.Join(err, c.wait(ctx, waiters))
	}
	// The reservations of the batch's keys leave in one call, which takes
	// the open batch: the next Counter holds its calls for open batches,
	// so that the reservations of batches read together share a call, as
	// exact operations do.
	if len(waiters) == 0 {
		c.launch(rs, batch)
		return nil
	}
	// This goroutine waits for the reservations anyway: it makes the call
	// itself, rather than hand it to another and wait to be woken (on a
	// busy machine each hand-off waits for a core).
	if len(rs) > 0 {
		c.call(rs, batch)
	} else if batch != nil {
		batch.Close()
	}
	return c.wait(ctx, waiters)
}

// unleaseReads turns the leased operations of no hits back into exact
// ones (a read: the store's count is the truth), with a sliding window's
// read that goes with each, and returns how many operations stay leased.
// A sliding window's operation and its read are paired by their label
// (engine.SlidingRead), never by their places; one without the other is
// engine.ErrBrokenPair.
func unleaseReads(ops []engine.CounterOp) (leased int, err error) {
	sliding, reads, zero := 0, 0, false
	for i := range ops {
		switch ops[i].Lease.Kind {
		case engine.LeaseNone:
			continue
		case engine.LeaseSliding:
			sliding++
		case engine.LeaseSlidingPrev:
			reads++
			leased++
			continue
		}
		zero = zero || ops[i].Hits == 0
		leased++
	}
	if sliding != reads {
		return 0, fmt.Errorf("%w: %d sliding window operations, %d reads", engine.ErrBrokenPair, sliding, reads)
	}
	if !zero {
		return leased, nil
	}
	for i := range ops {
		k := ops[i].Lease.Kind
		if k == engine.LeaseNone || k == engine.LeaseSlidingPrev || ops[i].Hits != 0 {
			continue
		}
		var prev *engine.CounterOp
		if k == engine.LeaseSliding {
			if prev, err = engine.SlidingRead(ops, i); err != nil {
				return 0, err
			}
			leased--
		}
		unlease(&ops[i], prev)
		leased--
	}
	return leased, nil
}

// unlease turns op (and prev, a sliding window's read that goes with it)
// back into an exact operation. Their pair label stays: applyDirect
// leases them again once they are answered.
func unlease(op, prev *engine.CounterOp) {
	if prev != nil {
		prev.Lease.Kind = engine.LeaseNone
	}
	op.Lease.Kind = engine.LeaseNone
}

// directOp is a leased window operation sent as a reservation of its own
// hits: ops[i] (with prev, a sliding window's read), whose lease kind was
// kind.
type directOp struct {
	i    int
	prev *engine.CounterOp
	kind engine.LeaseKind
	cold bool   // its key had no state
	hash uint64 // its key's (xxhash), for its stripe and the once set
}

// route is how try sends a decision that it did not answer at once.
type route uint8

const (
	notDirect route = iota // answered, or waiting for a reservation
	direct                 // a reservation of its own hits
	cold                   // the same, for a key with no state yet
)

// applyDirect sends the operations that are not leased and the direct
// reservations as one call with batch, then files what each direct
// reservation found into its key's state. A direct operation is the
// decision's own OpReserve of its hits (never OpAdd: memcache's add reads
// and increments later, and a count a lease trusts must be the
// counter's true value right after its hits), answered from the count it
// returns, as exact counting answers from its INCRBY.
func (c *Counter) applyDirect(ctx context.Context, ops []engine.CounterOp, direct []directOp, batch engine.Batch) error {
	for _, d := range direct {
		ops[d.i].Kind = engine.OpReserve
		unlease(&ops[d.i], d.prev)
	}
	if _, ok := c.next.(engine.WaitBounder); !ok {
		// The engine counts on WaitBound and set no deadline of its own;
		// a Router bounds its calls itself.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.o.CallTimeout)
		defer cancel()
	}
	err := c.applyExact(ctx, ops, batch)
	var rs []resv
	for _, d := range direct {
		op := &ops[d.i]
		op.Kind, op.Lease.Kind = engine.OpAdd, d.kind
		if d.prev != nil {
			d.prev.Lease.Kind = engine.LeaseSlidingPrev
		}
		c.settle(op, d.prev, d.hash, d.cold, err == nil, &rs)
	}
	c.launch(rs, nil)
	return err
}

// applyExact sends the operations that are not leased as one call.
func (c *Counter) applyExact(ctx context.Context, ops []engine.CounterOp, batch engine.Batch) error {
	n := 0
	for i := range ops {
		if ops[i].Lease.Kind == engine.LeaseNone {
			n++
		}
	}
	if n == len(ops) {
		return c.next.Apply(ctx, ops, batch)
	}
	exact := make([]engine.CounterOp, 0, n)
	for i := range ops {
		if ops[i].Lease.Kind == engine.LeaseNone {
			exact = append(exact, ops[i])
		}
	}
	if err := c.next.Apply(ctx, exact, batch); err != nil {
		return err
	}
	j := 0
	for i := range ops {
		if ops[i].Lease.Kind == engine.LeaseNone {
			ops[i].After = exact[j].After
			j++
		}
	}
	return nil
}

// try answers one leased operation from what its key's state owns, or
// queues it there (starting a reservation if none is in flight) and
// returns its waiter; call serves waiters in arrival order. Reservations
// it starts are added to out (send). A window's decision that no
// reservation would serve within a round trip — its key has no state
// yet (a cold key), or the reservation in flight has no room left for it
// — is sent direct instead: a reservation of its own hits, as exact
// counting sends its INCRBY, so no decision waits for a reservation
// started before it and then for another.
func (c *Counter) try(op, prev *engine.CounterOp, hash uint64, out *[]resv) (w *waiter, r route, err error) {
	s := &c.stripes[hash%stripes]
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.m[op.Key]
	if st == nil && op.Lease.Kind != engine.LeaseBucket {
		// A cold key: settle makes the state from its answer (one
		// hash, one clock reading for its whole decision).
		return nil, cold, nil
	}
	now := c.o.Clock().UnixMicro()
	if st == nil {
		st = newState(op, prev, now)
		s.m[op.Key] = st
	}
	st.retune(op)
	if len(st.waiters) == 0 && st.answer(op, prev, now) {
		st.lastUse = now
		c.flush(st, now, out)
		c.ahead(st, now, out)
		c.st.local.Inc()
		return nil, notDirect, nil
	}
	h := int64(min(op.Hits, 1<<62))
	if st.kind != engine.LeaseBucket && st.pending && st.spare < h &&
		st.limitAt(now)-st.seen-st.flying-st.direct >= h {
		// Near the limit it waits instead: the reservation in flight
		// likely finds the key over, and answers it without counting
		// its hits (fewer counts past the limit than exact counting).
		st.direct += h
		return nil, direct, nil
	}
	if c.ctx.Err() != nil {
		return nil, notDirect, ErrClosed
	}
	w = &waiter{st: st, op: op, prev: prev, done: make(chan error, 1)}
	st.waiters = append(st.waiters, w)
	if st.pending {
		st.spare -= h
	} else {
		c.reserve(st, now, out)
	}
	return w, notDirect, nil
}

// wait waits for every waiter's answer, within WaitBound; the first error
// is returned once all have been answered or withdrawn.
func (c *Counter) wait(ctx context.Context, ws []*waiter) error {
	var first error
	var t *time.Timer // made only if a waiter is not answered yet
	for _, w := range ws {
		var err error
		select {
		case err = <-w.done:
			c.st.waited.Inc()
		default:
			if t == nil {
				t = time.NewTimer(c.WaitBound())
				defer t.Stop()
			}
			select {
			case err = <-w.done:
				c.st.waited.Inc()
			case <-ctx.Done():
				err = c.withdraw(w, ctx.Err())
			case <-t.C:
				err = c.withdraw(w, fmt.Errorf("lease: no reservation for %q within %v: %w", w.op.Key, c.WaitBound(), context.DeadlineExceeded))
				t.Reset(0) // the others are out of time too
			}
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// withdraw takes w out of its key's queue and returns err, or, if it has
// been answered meanwhile, that answer.
func (c *Counter) withdraw(w *waiter, err error) error {
	s := c.stripe(w.op.Key)
	s.mu.Lock()
	gone := w.st.drop(w)
	s.mu.Unlock()
	if !gone {
		return <-w.done
	}
	return err
}

// WaitBound implements engine.WaitBounder: a decision waits for
// reservations at most as long as one call may take.
func (c *Counter) WaitBound() time.Duration {
	if wb, ok := c.next.(engine.WaitBounder); ok {
		return max(wb.WaitBound(), c.o.CallTimeout)
	}
	return c.o.CallTimeout
}

// ahead starts the next reservation of st before it runs out, unless its
// window ends before a reservation could come back: the decisions still
// to come in it are few, and each reserves for itself.
func (c *Counter) ahead(st *state, now int64, out *[]resv) {
	if st.pending || st.overUntil > now || st.slid || c.ctx.Err() != nil {
		return
	}
	if st.windowEnd > 0 && now+c.rtt.Load() >= st.windowEnd {
		return
	}
	lead := time.Duration(4*c.rtt.Load()) * time.Microsecond
	have := st.avail(now)
	if low := max(1, st.size/2, st.demand(now, lead)); have < low && st.demand(now, c.o.Horizon) > 0 && c.worth(st, have, now) {
		c.reserve(st, now, out)
	}
}

// worth reports whether a reservation ahead of need is worth its write:
// the key has saved a write already (credit), or its rate, once it has
// seen two decisions, says that more than what it owns will be used
// before its window ends (within the horizon). So a key's writes stay at
// most its decisions, but for the reservations that the rate promised and
// the traffic then did not use.
func (c *Counter) worth(st *state, have, now int64) bool {
	if st.credit >= 1 {
		return true
	}
	if st.decided < 2 {
		return false // one decision is no rate
	}
	left := c.o.Horizon
	if st.windowEnd > 0 {
		left = min(left, time.Duration(st.windowEnd-now)*time.Microsecond)
	}
	st.demand(now, 0) // brings the rate up to date
	return st.rate*left.Seconds() >= float64(have+1)
}

// Close stops the sweeper, gives back what every key holds, and waits for
// the reservations in flight; decisions waiting for them get their answer.
// The next Counter must still be open.
func (c *Counter) Close() error {
	c.closeMu.Do(func() {
		c.cancel()
		// A decision that saw the context open may be starting a
		// reservation under its stripe's lock: let it, so that Wait
		// counts it.
		for i := range c.stripes {
			c.stripes[i].mu.Lock()
			//lint:ignore SA2001 an empty critical section is the barrier
			c.stripes[i].mu.Unlock()
		}
		<-c.sweeper
		c.calls.Wait()
		c.giveBack(c.o.Clock().UnixMicro(), true)
	})
	return nil
}
