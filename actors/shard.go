package actors

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/engine"
)

// inlineBackend is implemented by backends whose calls do no I/O (memory):
// the shard calls them directly instead of handing them to a worker.
type inlineBackend interface{ Inline() bool }

func isInline(b engine.Backend) bool {
	ib, ok := b.(inlineBackend)
	return ok && ib.Inline()
}

// backendCall is one batch handed to a lane's workers.
type backendCall struct {
	uniq  []engine.Increment
	slot  []int
	batch []item
}

type flushDone struct{ backend int }
type windowElapsed struct{ backend int }

// lane is a shard's state for one backend.
type lane struct {
	pending  []item
	inFlight int
	timer    *time.Timer
	// current is the batch of an inline call being made, so a crash in the
	// middle of it still answers its waiters.
	current []item
}

// shard is one actor. Its fields are touched only from Receive.
type shard struct {
	r        *Router
	index    int
	backends [2]engine.Backend
	lanes    [2]lane
	// work feeds each network lane's MaxInFlight workers. It is set before
	// the shard starts and never changes; its capacity is MaxInFlight, and a
	// lane never has more calls out than that, so a send never blocks.
	work [2]chan backendCall
	// pending mirrors the number of queued items for observers outside the
	// actor (metrics, tests); the lanes remain the truth.
	pending atomic.Int64
	// waitSince is when the shard first held new arrivals for decisions
	// announced by Router.Expect, since its last call; zero when it has not.
	waitSince time.Time
}

func (s *shard) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *incrementMsg:
		var touched [2]bool
		for _, it := range m.items {
			b := 0
			if it.op.PerSecond && s.backends[1] != nil {
				b = 1
			}
			s.lanes[b].pending = append(s.lanes[b].pending, it)
			touched[b] = true
		}
		s.pending.Add(int64(len(m.items)))
		for b := range touched {
			if touched[b] {
				s.maybeFlush(ctx, b, false)
			}
		}
	case flushDone:
		if s.lanes[m.backend].inFlight > 0 {
			s.lanes[m.backend].inFlight--
		}
		s.maybeFlush(ctx, m.backend, true)
	case expectDone:
		for b := range s.lanes {
			s.maybeFlush(ctx, b, false)
		}
	case windowElapsed:
		s.lanes[m.backend].timer = nil
		s.maybeFlush(ctx, m.backend, true)
	case *actor.Stopping:
		s.failAll(ErrClosed)
	case *actor.Restarting:
		s.failAll(ErrShardRestarted)
	}
}

// failAll answers every waiter the shard still holds.
func (s *shard) failAll(err error) {
	s.waitSince = time.Time{}
	for b := range s.lanes {
		l := &s.lanes[b]
		if l.timer != nil {
			l.timer.Stop()
			l.timer = nil
		}
		for _, it := range l.current {
			it.reply <- err
		}
		for _, it := range l.pending {
			it.reply <- err
		}
		s.pending.Add(-int64(len(l.pending)))
		l.current, l.pending = nil, nil
	}
}

// maybeFlush sends the lane's batch if the backend may take another call.
// now says a call has just returned or a window elapsed: what waited leaves.
// Otherwise (new arrivals, or an expected decision sent) a batch leaves at
// once only if no call is out or it has ParallelMin keys; with a pipeline
// window a new batch waits for the window first, unless it is already full,
// and nothing new leaves while an expected decision holds the shard.
func (s *shard) maybeFlush(ctx actor.Context, b int, now bool) {
	l := &s.lanes[b]
	o := &s.r.o
	p := o.pipeline(b)
	for len(l.pending) > 0 && l.inFlight < o.MaxInFlight {
		full := p.full(len(l.pending))
		if !now && !full && s.work[b] != nil && s.held() {
			return // the expected decision sends it
		}
		if l.inFlight > 0 && !now && !full && len(l.pending) < o.ParallelMin {
			// A call is out: what arrives rides with the next one, sent
			// as soon as a call returns (group commit). Opening another
			// call in parallel pays only for a batch worth its round trip.
			return
		}
		if p.Window > 0 && !now && l.inFlight == 0 && !full {
			if l.timer == nil {
				self := ctx.Self()
				root := s.r.system.Root
				l.timer = time.AfterFunc(p.Window, func() {
					if !s.r.stopping.Load() {
						root.Send(self, windowElapsed{b})
					}
				})
			}
			return
		}
		if l.timer != nil {
			l.timer.Stop()
			l.timer = nil
		}
		n := len(l.pending)
		if p.full(n) {
			n = p.MaxKeys
		}
		batch := l.pending[:n:n]
		l.pending = l.pending[n:]
		s.pending.Add(-int64(n))
		s.flush(b, batch)
		if len(l.pending) == 0 {
			if s.work[b] == nil {
				// The inline call is over: its array takes the next arrivals.
				clear(batch)
				l.pending = batch[:0]
			} else {
				// The call out keeps batch. The next batch is likely about
				// as big: one array of that size instead of a doubling
				// series as it arrives.
				l.pending = make([]item, 0, n)
			}
		}
		now = true
	}
}

// held reports whether decisions announced by Router.Expect hold the
// shard's network lanes: for at most Hold since the shard first waited for
// them after its last call.
func (s *shard) held() bool {
	if s.r.expecting.Load() == 0 {
		return false
	}
	if s.waitSince.IsZero() {
		s.waitSince = time.Now()
		return true
	}
	return time.Since(s.waitSince) < s.r.o.Hold
}

// flush makes one backend call for batch: inline for a backend without I/O,
// otherwise on one of the lane's workers.
func (s *shard) flush(b int, batch []item) {
	s.waitSince = time.Time{}
	uniq, slot := coalesce(batch)
	if s.work[b] == nil {
		l := &s.lanes[b]
		l.current = batch
		err := s.backends[b].IncrementBatch(context.Background(), uniq)
		l.current = nil
		answer(uniq, slot, batch, err)
		return
	}
	s.lanes[b].inFlight++
	s.work[b] <- backendCall{uniq: uniq, slot: slot, batch: batch}
}

// worker makes the backend calls of one lane, one at a time, for as long as
// the Router runs. Long-lived workers keep their grown stacks and need no
// goroutine per call (both showed in profiles at low load); each answers its
// waiters itself and then tells the shard, which sends what piled up.
func (r *Router) worker(s *shard, b int, self *actor.PID) {
	defer r.workers.Done()
	backend := s.backends[b]
	for c := range s.work[b] {
		cctx, cancel := context.WithTimeout(r.callCtx, r.o.CallTimeout)
		err := backend.IncrementBatch(cctx, c.uniq)
		cancel()
		answer(c.uniq, c.slot, c.batch, err)
		if !r.stopping.Load() {
			r.system.Root.Send(self, flushDone{b})
		}
	}
}

// singleSlot is the slots of a one-item batch; shared, never written.
var singleSlot = []int{0}

// linearMax is the largest batch whose equal keys coalesce finds by
// comparing with the keys seen so far rather than through a map: cheaper
// for the few keys of one request or of a batch at low load.
const linearMax = 16

// coalesce merges the items of equal key and kind: slot[i] is the index in
// uniq of batch[i]'s entry. Token bucket steps are never merged: each stays
// its own entry, in arrival order, and the backend applies them in that
// order.
func coalesce(batch []item) (uniq []engine.Increment, slot []int) {
	if len(batch) == 1 {
		op := *batch[0].op
		op.After = 0
		return []engine.Increment{op}, singleSlot
	}
	uniq = make([]engine.Increment, 0, len(batch))
	slot = make([]int, len(batch))
	type kindKey struct {
		key  string
		kind engine.OpKind
	}
	var index map[kindKey]int
	if len(batch) > linearMax {
		index = make(map[kindKey]int, len(batch))
	}
	for i, it := range batch {
		if it.op.Kind == engine.OpTokenBucket {
			op := *it.op
			op.After = 0
			slot[i] = len(uniq)
			uniq = append(uniq, op)
			continue
		}
		k := kindKey{it.op.Key, it.op.Kind}
		u, seen := -1, false
		if index != nil {
			u, seen = index[k]
		} else {
			// A bucket step already in uniq never matches: its kind differs.
			for v := range uniq {
				if uniq[v].Kind == k.kind && uniq[v].Key == k.key {
					u, seen = v, true
					break
				}
			}
		}
		if !seen {
			u = len(uniq)
			uniq = append(uniq, engine.Increment{Key: k.key, Kind: k.kind})
			if index != nil {
				index[k] = u
			}
		}
		uniq[u].Hits += it.op.Hits
		// The reference refreshes the TTL on every hit; the last one wins.
		uniq[u].TTL = it.op.TTL
		slot[i] = u
	}
	return uniq, slot
}

// answer hands every waiter its count, in arrival order, as if its hits
// were applied in that order: the key's value before the batch plus the
// hits of the waiters ahead of it. A read (OpGet) and a bucket step get the
// backend's answer as it is. It uses each uniq entry's Hits as the running
// count: the call is over and the entries are this batch's own.
func answer(uniq []engine.Increment, slot []int, batch []item, err error) {
	if err == nil {
		for u := range uniq {
			uniq[u].Hits = uniq[u].After - min(uniq[u].After, uniq[u].Hits) // the key's value before this batch
		}
	}
	for i, it := range batch {
		if err == nil {
			u := &uniq[slot[i]]
			if u.Kind == engine.OpIncrement {
				u.Hits += it.op.Hits
				it.op.After = u.Hits
			} else {
				it.op.After = u.After
			}
		}
		it.reply <- err
	}
}
