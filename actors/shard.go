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

// backendCall is one call handed to a lane's workers: the coalesced
// operations, the slot of each item among them, and the items to answer.
type backendCall struct {
	uniq  []engine.CounterOp
	slot  []int
	items []item
}

type callDone struct{ lane laneID }
type windowElapsed struct{ lane laneID }

// lane is a shard's state for one backend.
type lane struct {
	pending  []item
	inFlight int
	timer    *time.Timer
	// current is the items of an inline call being made, so a crash in
	// the middle of it still answers its waiters.
	current []item
}

// shard is one actor. Its fields are touched only from Receive.
type shard struct {
	r        *Router
	index    int
	backends [laneCount]engine.Backend
	lanes    [laneCount]lane
	// work feeds each network lane's MaxInFlight workers. It is set before
	// the shard starts and never changes; its capacity is MaxInFlight, and a
	// lane never has more calls out than that, so a send never blocks.
	work [laneCount]chan backendCall
	// pending mirrors the number of queued items for observers outside the
	// actor (metrics, tests); the lanes remain the truth.
	pending atomic.Int64
	// holdSince is when the shard first held new arrivals for open
	// batches since its last call; zero when it has not.
	holdSince time.Time
}

func (s *shard) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *applyMsg:
		var touched [laneCount]bool
		for _, it := range m.items {
			id := laneMain
			if it.op.PerSecond && s.backends[lanePerSecond] != nil {
				id = lanePerSecond
			}
			s.lanes[id].pending = append(s.lanes[id].pending, it)
			touched[id] = true
		}
		s.pending.Add(int64(len(m.items)))
		for id := range touched {
			if touched[id] {
				s.maybeFlush(ctx, laneID(id), false)
			}
		}
	case callDone:
		if s.lanes[m.lane].inFlight > 0 {
			s.lanes[m.lane].inFlight--
		}
		s.maybeFlush(ctx, m.lane, true)
	case batchesClosed:
		for id := range s.lanes {
			s.maybeFlush(ctx, laneID(id), false)
		}
	case windowElapsed:
		s.lanes[m.lane].timer = nil
		s.maybeFlush(ctx, m.lane, true)
	case *actor.Stopping:
		s.failAll(ErrClosed)
	case *actor.Restarting:
		s.failAll(ErrShardRestarted)
	}
}

// failAll answers every waiter the shard still holds.
func (s *shard) failAll(err error) {
	s.holdSince = time.Time{}
	for id := range s.lanes {
		l := &s.lanes[id]
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

// state is lane id's state as nextStep sees it. callEnded says a call has
// just returned or a window elapsed.
func (s *shard) state(id laneID, callEnded bool) laneState {
	l := &s.lanes[id]
	st := laneState{
		pending:     len(l.pending),
		inFlight:    l.inFlight,
		maxInFlight: s.r.o.MaxInFlight,
		callEnded:   callEnded,
		network:     s.work[id] != nil,
	}
	// Only a network lane can be held: an inline one reads neither the
	// open batches (a counter every batch writes) nor the clock.
	if st.network && !callEnded {
		st.batchOpen = s.r.openBatches.Load() > 0
		if st.batchOpen && !s.holdSince.IsZero() {
			st.holdExpired = time.Since(s.holdSince) >= s.r.o.Batch.Hold
		}
	}
	return st
}

// maybeFlush sends lane id's pending operations as its next steps say,
// until it has to wait. callEnded says a call has just returned or a
// window elapsed.
func (s *shard) maybeFlush(ctx actor.Context, id laneID, callEnded bool) {
	l := &s.lanes[id]
	p := &s.r.o.Batch
	pl := p.pipeline(id)
	for {
		switch nextStep(s.state(id, callEnded), p.ParallelMin, pl) {
		case stepIdle, stepGroup:
			return
		case stepHold:
			if s.holdSince.IsZero() {
				s.holdSince = time.Now()
			}
			return
		case stepWindow:
			if l.timer == nil {
				self := ctx.Self()
				root := s.r.system.Root
				l.timer = time.AfterFunc(pl.Window, func() {
					if !s.r.stopping.Load() {
						root.Send(self, windowElapsed{id})
					}
				})
			}
			return
		}
		s.sendPending(id, pl)
		callEnded = true
	}
}

// sendPending makes one call of lane id's pending operations, at most a
// full pipeline of them.
func (s *shard) sendPending(id laneID, pl Pipeline) {
	l := &s.lanes[id]
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	n := len(l.pending)
	if pl.full(n) {
		n = pl.MaxKeys
	}
	items := l.pending[:n:n]
	l.pending = l.pending[n:]
	s.pending.Add(-int64(n))
	s.flush(id, items)
	if len(l.pending) > 0 {
		return
	}
	if s.work[id] == nil {
		// The inline call is over: its array takes the next arrivals.
		clear(items)
		l.pending = items[:0]
	} else {
		// The call out keeps items. The next call is likely about as
		// big: one array of that size instead of a doubling series as
		// it arrives.
		l.pending = make([]item, 0, n)
	}
}

// flush makes one backend call for items: inline for a backend without
// I/O, otherwise on one of the lane's workers.
func (s *shard) flush(id laneID, items []item) {
	s.holdSince = time.Time{}
	uniq, slot := coalesce(items)
	if s.work[id] == nil {
		l := &s.lanes[id]
		l.current = items
		err := s.backends[id].Exec(context.Background(), uniq)
		l.current = nil
		answer(uniq, slot, items, err)
		return
	}
	s.lanes[id].inFlight++
	s.work[id] <- backendCall{uniq: uniq, slot: slot, items: items}
}

// worker makes the backend calls of one lane, one at a time, for as long as
// the Router runs. Long-lived workers keep their grown stacks and need no
// goroutine per call; each answers its waiters itself and then tells the
// shard, which sends what piled up.
func (r *Router) worker(s *shard, id laneID, self *actor.PID) {
	defer r.workers.Done()
	backend := s.backends[id]
	for c := range s.work[id] {
		cctx, cancel := context.WithTimeout(r.callCtx, r.o.CallTimeout)
		err := backend.Exec(cctx, c.uniq)
		cancel()
		answer(c.uniq, c.slot, c.items, err)
		if !r.stopping.Load() {
			r.system.Root.Send(self, callDone{id})
		}
	}
}

// singleSlot is the slots of a one-item call; shared, never written.
var singleSlot = []int{0}

// linearMax is the largest call whose equal keys coalesce finds by
// comparing with the keys seen so far rather than through a map: cheaper
// for the few keys of one request or of a call at low load.
const linearMax = 16

// coalesce merges the items of equal key and kind: slot[i] is the index in
// uniq of items[i]'s entry. Token bucket steps are never merged: each stays
// its own entry, in arrival order, and the backend applies them in that
// order. The entries carry what the backend does only (no lease terms).
func coalesce(items []item) (uniq []engine.CounterOp, slot []int) {
	if len(items) == 1 {
		op := *items[0].op
		op.After, op.Lease = 0, engine.LeaseTerms{}
		return []engine.CounterOp{op}, singleSlot
	}
	uniq = make([]engine.CounterOp, 0, len(items))
	slot = make([]int, len(items))
	type kindKey struct {
		key  string
		kind engine.OpKind
	}
	var index map[kindKey]int
	if len(items) > linearMax {
		index = make(map[kindKey]int, len(items))
	}
	for i, it := range items {
		if it.op.Kind == engine.OpTokenBucket || it.op.Kind == engine.OpTokenTake {
			op := *it.op
			op.After, op.Lease = 0, engine.LeaseTerms{}
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
			uniq = append(uniq, engine.CounterOp{Key: k.key, Kind: k.kind})
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
// were applied in that order: the key's value before the call plus the
// hits of the waiters ahead of it (OpAdd and OpReserve). A read, a release
// and a bucket step get the backend's answer as it is. It uses each uniq entry's Hits as the running
// count: the call is over and the entries are this call's own.
func answer(uniq []engine.CounterOp, slot []int, items []item, err error) {
	if err == nil {
		for u := range uniq {
			uniq[u].Hits = uniq[u].After - min(uniq[u].After, uniq[u].Hits) // the key's value before this call
		}
	}
	for i, it := range items {
		if err == nil {
			u := &uniq[slot[i]]
			if u.Kind == engine.OpAdd || u.Kind == engine.OpReserve {
				u.Hits += it.op.Hits
				it.op.After = u.Hits
			} else {
				it.op.After = u.After
			}
		}
		it.reply <- err
	}
}
