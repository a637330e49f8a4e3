package actors

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/engine"
)

// inlineBackend is implemented by backends whose calls do no I/O (memory):
// the shard calls them directly instead of in a goroutine.
type inlineBackend interface{ Inline() bool }

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
	// pending mirrors the number of queued items for observers outside the
	// actor (metrics, tests); the lanes remain the truth.
	pending atomic.Int64
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
// With a pipeline window a new batch waits for the window first, unless it is
// already full or has waited behind a call in flight (now).
func (s *shard) maybeFlush(ctx actor.Context, b int, now bool) {
	l := &s.lanes[b]
	o := &s.r.o
	p := o.pipeline(b)
	for len(l.pending) > 0 && l.inFlight < o.MaxInFlight {
		if p.Window > 0 && !now && l.inFlight == 0 && !p.full(len(l.pending)) {
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
		if len(l.pending) == 0 {
			l.pending = nil // let the old array go
		}
		s.flush(ctx, b, batch)
		now = true
	}
}

// flush makes one backend call for batch.
func (s *shard) flush(ctx actor.Context, b int, batch []item) {
	backend := s.backends[b]
	uniq, groups := coalesce(batch)
	if ib, ok := backend.(inlineBackend); ok && ib.Inline() {
		l := &s.lanes[b]
		l.current = batch
		err := backend.IncrementBatch(context.Background(), uniq)
		l.current = nil
		answer(uniq, groups, batch, err)
		return
	}
	s.lanes[b].inFlight++
	r := s.r
	self := ctx.Self()
	r.calls.Add(1)
	go func() {
		defer r.calls.Done()
		cctx, cancel := context.WithTimeout(r.callCtx, r.o.CallTimeout)
		err := backend.IncrementBatch(cctx, uniq)
		cancel()
		answer(uniq, groups, batch, err)
		if !r.stopping.Load() {
			r.system.Root.Send(self, flushDone{b})
		}
	}()
}

// singleGroup is the grouping of a one-item batch; shared, never written.
var singleGroup = [][]int{{0}}

// coalesce merges the items of equal key and kind. groups[u] lists, in
// arrival order, the indexes into batch of the items of uniq[u]. Token bucket
// steps are never merged: each stays its own entry, in arrival order, and
// the backend applies them in that order.
func coalesce(batch []item) (uniq []engine.Increment, groups [][]int) {
	if len(batch) == 1 {
		op := *batch[0].op
		op.After = 0
		return []engine.Increment{op}, singleGroup
	}
	type slot struct {
		key  string
		kind engine.OpKind
	}
	index := make(map[slot]int, len(batch))
	for i, it := range batch {
		if it.op.Kind == engine.OpTokenBucket {
			op := *it.op
			op.After = 0
			uniq = append(uniq, op)
			groups = append(groups, []int{i})
			continue
		}
		k := slot{it.op.Key, it.op.Kind}
		u, seen := index[k]
		if !seen {
			u = len(uniq)
			index[k] = u
			uniq = append(uniq, engine.Increment{Key: it.op.Key, Kind: it.op.Kind})
			groups = append(groups, nil)
		}
		uniq[u].Hits += it.op.Hits
		// The reference refreshes the TTL on every hit; the last one wins.
		uniq[u].TTL = it.op.TTL
		groups[u] = append(groups[u], i)
	}
	return uniq, groups
}

// answer hands every waiter its count, as if its hits were applied in
// arrival order. A read (OpGet) and a bucket step get the backend's answer
// as it is.
func answer(uniq []engine.Increment, groups [][]int, batch []item, err error) {
	for u := range uniq {
		count := uniq[u].After - min(uniq[u].After, uniq[u].Hits) // the key's value before this batch
		for _, i := range groups[u] {
			it := batch[i]
			if err == nil {
				if uniq[u].Kind == engine.OpIncrement {
					count += it.op.Hits
					it.op.After = count
				} else {
					it.op.After = uniq[u].After
				}
			}
			it.reply <- err
		}
	}
}
