package odata

import (
	"sync"
	"sync/atomic"
	"time"
)

// Data slots cap the requests doing database work at once (MaxQueries). A
// streamed page holds its slot (and its database connection) until its
// body is written, at the pace its client reads; a client that reads
// nothing, or a byte now and then, would hold it until StreamTimeout. So
// a slot's holder must keep its client reading: when every slot is taken,
// a request waits up to SlotWait, and a holder whose current write has
// waited on its client for StallPreempt or more gives its slot up — its
// connection is closed, which ends the write, the cursor and the page — so
// the waiting request is served. Without contention nobody is cut before
// StallTimeout (no byte accepted) or StreamTimeout (the whole body); with
// it, a reader slower than one write (64 KiB) per StallPreempt loses to
// one that reads. This is nginx's send_timeout applied only when someone
// else needs the slot.

// dataSlots is the pool of slots and who holds them.
type dataSlots struct {
	size         int
	preemptAfter time.Duration
	now          func() time.Time

	mu      sync.Mutex
	free    int
	holders map[*grant]struct{}
	freed   chan struct{} // closed when a slot is released, then replaced
}

func newDataSlots(n int, preemptAfter time.Duration) *dataSlots {
	return &dataSlots{size: n, preemptAfter: preemptAfter, now: time.Now, free: n,
		holders: map[*grant]struct{}{}, freed: make(chan struct{})}
}

// acquire takes a slot for g before deadline, preempting a stalled holder
// when none is free. It returns false at deadline or when closing is
// closed.
func (d *dataSlots) acquire(g *grant, deadline time.Time, closing <-chan struct{}) bool {
	for {
		d.mu.Lock()
		if d.free > 0 {
			d.free--
			d.holders[g] = struct{}{}
			d.mu.Unlock()
			return true
		}
		now := d.now()
		if !now.Before(deadline) {
			d.mu.Unlock()
			return false // nobody is cut for a request that will not wait
		}
		victim, wait := d.stalledLocked(now)
		freed := d.freed
		d.mu.Unlock()
		if victim != nil {
			victim.cut()
		}
		// Wake on a release, or when the next holder could be preempted,
		// or at the deadline.
		wait = min(max(wait, time.Millisecond), deadline.Sub(now))
		t := time.NewTimer(wait)
		select {
		case <-freed:
		case <-t.C:
		case <-closing:
			t.Stop()
			return false
		}
		t.Stop()
	}
}

// stalledLocked picks the holder whose write has waited longest, if that
// is StallPreempt or more, and marks it cut; otherwise it says how long
// until the longest waiting one could be.
func (d *dataSlots) stalledLocked(at time.Time) (victim *grant, wait time.Duration) {
	now := at.UnixNano()
	var oldest int64
	for g := range d.holders {
		since := g.writingSince()
		if since == 0 || g.preempted {
			continue
		}
		if victim == nil || since < oldest {
			victim, oldest = g, since
		}
	}
	if victim == nil {
		return nil, d.preemptAfter
	}
	if blocked := time.Duration(now - oldest); blocked < d.preemptAfter {
		return nil, d.preemptAfter - blocked
	}
	victim.preempted = true
	return victim, 0
}

func (d *dataSlots) release(g *grant) {
	d.mu.Lock()
	if _, ok := d.holders[g]; ok {
		delete(d.holders, g)
		d.free++
		close(d.freed)
		d.freed = make(chan struct{})
	}
	d.mu.Unlock()
}

// inUse is how many slots are held.
func (d *dataSlots) inUse() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.holders)
}

// writeClock is what a response's connection tells its slot: since when
// its current write has been waiting on the client (0: not writing).
type writeClock struct{ since atomic.Int64 }

func (w *writeClock) start() { w.since.Store(time.Now().UnixNano()) }
func (w *writeClock) stop()  { w.since.Store(0) }
