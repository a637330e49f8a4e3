package lease

import (
	"math"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// span is a run of counts (windows: lo … hi, step 1) or of token times
// (buckets: lo, lo+I, … hi) that a state owns; empty when lo > hi.
type span struct{ lo, hi int64 }

// state is one cache key's reservations on this replica. Its stripe's lock
// guards it.
type state struct {
	kind      engine.LeaseKind
	key       string
	prevKey   string // sliding windows: the previous window's counter
	ttl       time.Duration
	perSecond bool
	limit     uint64
	unitSec   int64
	windowEnd int64 // unix µs; windows only
	interval  int64 // buckets: µs per token
	burst     int64 // buckets: tokens

	spans     []span
	seen      int64     // windows: the counter as last seen; buckets: the TAT
	prev      uint64    // sliding windows: the previous window's count
	overUntil int64     // unix µs: over, answered here, until then
	pending   bool      // a reservation is in flight
	spare     int64     // of it, hits no waiter counts on yet
	flying    int64     // its hits (with the refused hits it carries)
	direct    int64     // hits of direct decisions in flight (Counter.try)
	size      int64     // the last reservation's size
	waiters   []*waiter // decisions waiting for hits, in arrival order

	// refused is a sliding window's hits answered over and not yet added
	// to its counter (exact counting adds them: they weigh on the next
	// window); carried is what the reservation in flight carries of them.
	// absorb is what a short reservation added to the counter and did not
	// grant: the over decisions it answers are counted there already.
	refused, carried, absorb int64
	// slid: a sliding window's reservation came back short in this
	// window: from then on it reserves only the hits of decisions waiting
	// (each hit it adds is a decision's, as in exact counting).
	slid bool
	// credit is the decisions answered less the writes sent (reservations
	// and give-backs): a write ahead of need is sent only from credit, or
	// when the key's rate says it will be used (see Counter.worth).
	credit  int64
	decided int64   // decisions answered
	rate    float64 // hits per second on this replica
	used    int64   // hits taken since rateAt
	rateAt  int64
	lastUse int64
}

// waiter is a decision waiting for its key's reservations; done gets its
// answer once op (and prev) are filled.
type waiter struct {
	st       *state
	op, prev *engine.CounterOp
	done     chan error
}

// drop removes w from the waiters; false when it is no longer there (it
// has been answered).
func (st *state) drop(w *waiter) bool {
	for i, x := range st.waiters {
		if x == w {
			st.waiters = append(st.waiters[:i], st.waiters[i+1:]...)
			return true
		}
	}
	return false
}

// waiting is the hits of the decisions waiting.
func (st *state) waiting() uint64 {
	var n uint64
	for _, w := range st.waiters {
		n += w.op.Hits
	}
	return n
}

// serve answers the waiters in arrival order while st can; err, if not
// nil, answers them all.
func (st *state) serve(now int64, err error) {
	n := 0
	for _, w := range st.waiters {
		if err == nil && !st.answer(w.op, w.prev, now) {
			break
		}
		w.done <- err
		n++
	}
	if n > 0 {
		st.lastUse = now
		rest := copy(st.waiters, st.waiters[n:])
		clear(st.waiters[rest:])
		st.waiters = st.waiters[:rest]
	}
}

func newState(op, prev *engine.CounterOp, now int64) *state {
	st := &state{kind: op.Lease.Kind, key: op.Key, ttl: op.TTL, perSecond: op.PerSecond,
		limit: uint64(op.Lease.Limit), unitSec: int64(op.Lease.UnitSec), interval: op.Bucket.Interval, burst: op.Bucket.Burst,
		rateAt: now, lastUse: now, spans: make([]span, 0, 2)}
	if prev != nil {
		st.prevKey = prev.Key
	}
	if st.kind != engine.LeaseBucket && st.unitSec > 0 {
		// The window the key names is the one the decision's time is in
		// (the engine's clock); this replica's clock, read later, may be
		// past its end already.
		at := now
		if op.Lease.At > 0 {
			at = op.Lease.At
		}
		unitUs := st.unitSec * 1e6
		st.windowEnd = (at/unitUs + 1) * unitUs
	}
	return st
}

// retune follows a rule that changed under a key (a configuration
// reload): owned counts above a lowered limit are dropped, and a bucket
// whose rate or burst changed drops its tokens (their times were reckoned
// at the old rate). Nothing is given back: fewer admitted, never more.
func (st *state) retune(op *engine.CounterOp) {
	if st.kind == engine.LeaseBucket {
		if b := op.Bucket; b.Interval != st.interval || b.Burst != st.burst {
			st.interval, st.burst, st.spans = b.Interval, b.Burst, st.spans[:0]
		}
		return
	}
	if uint64(op.Lease.Limit) == st.limit {
		return
	}
	st.limit = uint64(op.Lease.Limit)
	top := int64(min(st.limit, 1<<62))
	kept := st.spans[:0]
	for _, sp := range st.spans {
		sp.hi = min(sp.hi, top)
		if sp.lo <= sp.hi {
			kept = append(kept, sp)
		}
	}
	st.spans = kept
	st.overUntil = 0 // a raised limit may have room again
}

// step is the distance between two owned items: a count, or a token's time.
func (st *state) step() int64 {
	if st.kind == engine.LeaseBucket {
		return max(st.interval, 1)
	}
	return 1
}

// avail is how many hits st owns at now (a bucket's tokens whose time has
// passed are dropped first: unused, they are lost, as in the bucket).
func (st *state) avail(now int64) int64 {
	if st.kind == engine.LeaseBucket {
		st.expire(now)
	}
	n, step := int64(0), st.step()
	for _, s := range st.spans {
		if s.lo <= s.hi {
			n += (s.hi-s.lo)/step + 1
		}
	}
	return n
}

// expire drops the tokens whose time is at or before now.
func (st *state) expire(now int64) (dropped int64) {
	i := st.interval
	for len(st.spans) > 0 {
		s := &st.spans[0]
		if s.lo > now {
			break
		}
		k := min((now-s.lo)/i+1, (s.hi-s.lo)/i+1)
		s.lo += k * i
		dropped += k
		if s.lo > s.hi {
			st.spans = st.spans[1:]
		}
	}
	return dropped
}

// takeFront removes h owned items from the front and returns the first and
// last taken. The caller has checked that st owns h.
func (st *state) takeFront(h int64) (first, last int64) {
	step := st.step()
	first = -1
	for h > 0 {
		s := &st.spans[0]
		if first < 0 {
			first = s.lo
		}
		k := min(h, (s.hi-s.lo)/step+1)
		last = s.lo + (k-1)*step
		s.lo += k * step
		h -= k
		if s.lo > s.hi {
			st.spans = st.spans[1:]
		}
	}
	return first, last
}

// takeBack removes up to h owned counts from the back (the ones given back)
// and returns how many it removed.
func (st *state) takeBack(h int64) int64 {
	took := int64(0)
	for h > 0 && len(st.spans) > 0 {
		s := &st.spans[len(st.spans)-1]
		k := min(h, s.hi-s.lo+1)
		s.hi -= k
		h -= k
		took += k
		if s.lo > s.hi {
			st.spans = st.spans[:len(st.spans)-1]
		}
	}
	return took
}

// answer fills op (and a sliding window's prev) from what st owns, or from
// its over-limit state, and reports whether it could. An over decision is
// answered as exact counting would answer it from what this replica knows:
// a window's owned counts are used up by it (exact counting adds the hits
// whatever the verdict), a bucket's are left (a refused step takes nothing).
func (st *state) answer(op, prev *engine.CounterOp, now int64) bool {
	h := int64(min(op.Hits, 1<<62))
	avail := st.avail(now)
	switch {
	case avail >= h:
		first, last := st.takeFront(h)
		st.used += h
		if st.kind == engine.LeaseBucket {
			op.After = uint64(first - st.interval) // the TAT a step taking these tokens would have found
		} else {
			op.After = uint64(last)
		}
	case st.overUntil <= now:
		return false
	case st.kind == engine.LeaseBucket:
		tat := st.seen
		if avail > 0 {
			tat = st.spans[0].lo - st.interval
		}
		if max(tat, now)+h*st.interval-now <= st.burst*st.interval {
			tat = now + st.burst*st.interval // what this replica owns does not fit: over, as an empty bucket
		}
		op.After = uint64(tat)
	default:
		count := max(st.seen, int64(min(st.limit, 1<<62)))
		if avail > 0 {
			first, _ := st.takeFront(avail)
			count = first - 1
		}
		// The verdict must be over whatever the counts this replica owns:
		// they may sit below counts other replicas own.
		op.After = uint64(max(count+h, int64(min(st.limit, 1<<62))+1))
		if st.kind == engine.LeaseSliding {
			// The owned counts it used up are in the counter already, and
			// so is what the short reservation added and did not grant.
			rest := h - avail
			in := min(rest, st.absorb)
			st.absorb -= in
			st.refused += rest - in
			st.seen += rest - in
		}
	}
	if prev != nil {
		prev.After = st.prev
	}
	st.credit++
	st.decided++
	return true
}

// rateTau is the time constant of a key's rate: long enough that a key
// seen twice a second keeps a steady estimate between its decisions.
const rateTau = float64(time.Second / time.Microsecond)

// demand is st's rate, brought up to date at now, in hits per span. The
// rate is an exponentially weighted average of the hits taken, decaying
// with rateTau, so a key's rate falls once its decisions stop.
func (st *state) demand(now int64, span time.Duration) int64 {
	if dt := now - st.rateAt; dt > 0 {
		a := math.Exp(-float64(dt) / rateTau)
		st.rate = a*st.rate + float64(st.used)*(1-a)/float64(dt)*1e6
		st.used, st.rateAt = 0, now
	}
	return int64(st.rate*span.Seconds() + 0.999)
}

// slidingWeight is the previous window's count × the share of it still
// inside the rolling window ending at now (µs), rounded up: a grant must
// not count on weight that has not decayed yet.
func slidingWeight(prev uint64, now, unitSec int64) uint64 {
	unitUs := unitSec * 1e6
	left := unitUs - now%unitUs
	if prev == 0 || left <= 0 {
		return 0
	}
	return uint64((float64(prev)*float64(left) + float64(unitUs) - 1) / float64(unitUs))
}

// limitAt is the most a window's counter may hold at now.
func (st *state) limitAt(now int64) int64 {
	l := int64(min(st.limit, 1<<62))
	if st.kind == engine.LeaseSliding {
		// A reservation back after its window ended is judged at the
		// window's last moment: the weight belongs to this window.
		at := now
		if st.windowEnd > 0 {
			at = min(now, st.windowEnd-1)
		}
		l -= int64(min(slidingWeight(st.prev, at, st.unitSec), 1<<62))
	}
	return l
}

// slidingClear is when one more hit fits in a sliding window whose counter
// holds seen: the previous window's weight decays to 0 at the window's end.
func (st *state) slidingClear() int64 {
	free := int64(st.limit) - st.seen - 1
	if free < 0 || st.prev == 0 {
		return st.windowEnd
	}
	unitUs := st.unitSec * 1e6
	// prev × left / unit ≤ free  ⇔  left ≤ free × unit / prev
	maxLeft := int64(float64(free) * float64(unitUs) / float64(st.prev))
	return max(st.windowEnd-maxLeft, 0)
}
