package engine

import (
	"context"
	"sync"
	"sync/atomic"
)

// BatchItem is one request of ShouldRateLimitBatch: Req in, and Resp or Err
// out.
type BatchItem struct {
	Req  *Request
	Resp *Response
	Err  error
}

// ShouldRateLimitBatch decides the requests of batch (the calls a gRPC
// server read from one connection at once) as ShouldRateLimit decides
// each, with one Counter.Apply for the operations of them all: one message
// per shard, one wait, instead of one of each per request. Counts are as
// if the requests had come one after another in items' order. A request's
// own error (a bad request, an invalid key) is its alone; a counter
// failure fails every request that had operations. With
// StopIncrementOnLimit each request reads before it counts, so the
// requests are decided one per goroutine instead, and batch is closed once
// every one of them has sent its first operations. batch may be nil; it is
// closed by the time ShouldRateLimitBatch returns.
func (s *Service) ShouldRateLimitBatch(ctx context.Context, batch Batch, items []BatchItem) {
	if s.o.StopIncrementOnLimit {
		s.decideEach(ctx, batch, items)
		return
	}
	defer closeBatch(batch)
	type part struct {
		infos  []limitInfo
		lo, hi int // the request's ops
	}
	parts := make([]part, len(items))
	n := 0
	for i := range items {
		n += len(items[i].Req.Descriptors)
	}
	infos := make([]limitInfo, n)
	ops := make([]CounterOp, 0, n)
	now := s.o.Clock()
	for i := range items {
		req := items[i].Req
		cfg, err := s.check(req)
		if err != nil {
			items[i].Err = err
			continue
		}
		in := infos[:len(req.Descriptors):len(req.Descriptors)]
		infos = infos[len(req.Descriptors):]
		lo := len(ops)
		// The ops' indexes in limitInfo count from the batch's first op.
		if ops, err = s.prepare(cfg, req, in, ops, now); err != nil {
			items[i].Err = err
			ops = ops[:lo]
			continue
		}
		parts[i] = part{infos: in, lo: lo, hi: len(ops)}
	}
	var err error
	if len(ops) > 0 {
		err = s.apply(ctx, ops, batch)
	}
	// One allocation holds the responses of the requests with up to three
	// descriptors.
	ds := make([]decision, len(items))
	for i := range items {
		p := &parts[i]
		if items[i].Err != nil {
			continue
		}
		if p.hi > p.lo {
			if err != nil {
				s.backendError.Inc()
				items[i].Err = BackendError(err)
				continue
			}
			s.fill(p.infos, ops, nil)
		}
		items[i].Resp = s.respond(items[i].Req, p.infos, ds[i].response(len(p.infos)), now)
	}
}

// decideEach decides the requests of batch one per goroutine; each holds
// a part of batch, and batch closes when the last part does.
func (s *Service) decideEach(ctx context.Context, batch Batch, items []BatchItem) {
	var parts *batchParts
	if batch != nil {
		parts = &batchParts{batch: batch}
		parts.left.Store(int32(len(items)))
	}
	var wg sync.WaitGroup
	for i := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			items[i].Resp, items[i].Err = s.decideOne(ctx, items[i].Req, parts.part())
		}()
	}
	wg.Wait()
	closeBatch(batch) // also when items is empty
}

// batchParts closes batch once each of its parts has closed.
type batchParts struct {
	batch Batch
	left  atomic.Int32
}

// part is one share of p, or nil when there is no batch.
func (p *batchParts) part() Batch {
	if p == nil {
		return nil
	}
	return &batchPart{p: p}
}

// batchPart is one request's share of a batch.
type batchPart struct {
	p      *batchParts
	closed atomic.Bool
}

func (b *batchPart) Close() {
	if !b.closed.Swap(true) && b.p.left.Add(-1) == 0 {
		b.p.batch.Close()
	}
}
