package quota

import (
	"container/heap"
	"context"
	"runtime"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/alloc"
)

// msgKind is what a message to a shard carries.
type msgKind uint8

const (
	msgReport msgKind = iota // a stream's usages of the shard's buckets
	msgClose                 // a stream ended
	msgResult                // a store call returned
	msgBoard                 // a board exchange returned
	msgDrain                 // give back what a stopping replica holds
	msgAck                   // a stream's transport acknowledged what it wrote
)

type msg struct {
	kind  msgKind
	st    *Stream
	at    time.Time
	info  streamInfo
	sweep bool // answer the stream's refused buckets
	light bool // msgAck, msgClose: the stream tracks few buckets
	// opening: msgReport, a part of the stream's first report.
	opening bool
	upTo    time.Time // msgAck: what was acknowledged
	usages  []usageAt
	call    *call
	board   *boardCall
	done    chan struct{}
}

const (
	// batchSize and batchUsages bound the messages and usages a shard
	// takes before it serves the hubs they made dirty: reports that came
	// together are served together, and results and a small report that
	// just came wait for one batch at most. Four chunks (maxChunk) a
	// batch, not one: an Envoy's report of 1,000 buckets is 8 chunks a
	// shard, and at one a batch each waited for a turn of due renewals
	// (dueBatch hubs) and a store call of its own (50 Envoys × 1,000
	// buckets at 5 s: a report's new bucket answered at p99 0.29-0.76 s
	// with 64, 0.10-0.20 s native and 0.10 s grpc-go with 256, server CPU
	// per 1,000 reports 87-102 → 71-79 ms native, 102 → 90-92 ms grpc-go).
	batchSize   = 16
	batchUsages = 4 * maxChunk
	// opsHigh: while a store call is out and this many operations wait
	// for the next, the shard takes none of its streams' messages. A new
	// bucket costs a reservation on each window its first assignment
	// reaches (a dozen or more); taking a flood's reports as fast as they
	// can be planned made each store call as long as the flood so far,
	// and every report taken after it (the probe's) waited for it and for
	// the next. The store's pace sets the intake's: what waits, waits in
	// the lanes, where a small report is served first.
	opsHigh = 512
	// dueBatch bounds the hubs a shard serves for their renewals (or
	// cleanups) before it looks at its results and streams again: the
	// hubs a flood created fall due together, and serving them all at
	// once made one store call of hundreds of thousands of operations.
	dueBatch = 64
	// expressUsages: a report of at most this many usages is small. Its
	// buckets' operations leave in a store call of their own (express),
	// at most one out at a time beside the backlog's, and while the
	// backlog is full (opsHigh) the shard still takes small reports, the
	// least charged lane's first, until expressHigh operations wait for
	// the next express call. A probe's one new bucket waited for the
	// store call out, then its own among a flood's thousands of
	// operations (hundreds of ms each on a loaded machine).
	expressUsages = 4
	expressHigh   = 64
	// expressBuckets: a stream tracking at most this many buckets is
	// light (Stream.light).
	expressBuckets = 128
)

// shard owns the hubs whose key hashes to it: one goroutine (loop) reads
// its streams' messages (intake, fairly), serves its hubs when due, and
// makes at most one store call at a time (the operations of every hub that
// needs one, together).
type shard struct {
	s   *Service
	idx int
	in  *intake
	// ctl brings what is not a stream's (a drain).
	ctl chan msg
	// results bring back the shard's own calls (a store call, a board
	// exchange: at most one of each out): read before the streams'
	// messages, so that hubs waiting for a store answer are not queued
	// behind the reports a flood of streams keeps posting.
	results chan msg
	hubs    map[string]*hub
	// byStream are the hubs where a stream has a reporter (some may be
	// gone), for its close.
	byStream map[*Stream][]*hub
	due      dueHeap
	dirty    []*hub
	// xdirty are the hubs made express while queued, for interleave to
	// find without walking dirty (a flood's backlog); some may have been
	// served since.
	xdirty []*hub

	planner alloc.Planner
	out     alloc.Output
	// pushes are the actions decided since the last finish, per stream.
	pushes map[*Stream][]Action
	// acks keeps, per stream acknowledged at least once, the hubs its
	// next acknowledgement confirms (acked); a stream not in it (never
	// acknowledged, or its list dropped) is looked at whole.
	acks map[*Stream][]cutAt
	// ops waiting for the next store call; calling is true while one is
	// out.
	ops     []pendingOp
	calling bool
	// xops and xcalling are the same for the express calls.
	xops     []pendingOp
	xcalling bool
	// spare is a store call's operations array, booked and cleared, for
	// the next call's: a flood's shard appended its operations to a new
	// array for every call, a fifth of all the server allocated, and the
	// collector's work grew with it.
	spare []pendingOp
	// cfg is the config the hubs were looked up in.
	cfg *engine.Config

	boardCalling bool
	boardWant    []*hub
}

func newShard(s *Service, idx int) *shard {
	sh := &shard{s: s, idx: idx, hubs: make(map[string]*hub), byStream: make(map[*Stream][]*hub),
		pushes: make(map[*Stream][]Action), acks: make(map[*Stream][]cutAt)}
	if !s.manual {
		sh.in = newIntake(s.o.Clock)
		sh.ctl = make(chan msg)
		sh.results = make(chan msg, 3)
	}
	sh.planner.O = s.o.Alloc
	return sh
}

// post hands m to the shard; false if the service stopped (or ctx ended)
// first. A manual shard serves it at once. A stream's message waits in its
// lane, for room when the lane is full.
func (sh *shard) post(ctx context.Context, m msg) bool {
	if sh.s.manual {
		sh.handle(m)
		sh.finish(m.at)
		return true
	}
	if m.st == nil {
		select {
		case sh.ctl <- m:
			return true
		case <-sh.s.stop:
			return false
		case <-ctx.Done():
			return false
		}
	}
	for {
		if sh.s.isClosed() {
			return false
		}
		ok, space := sh.in.put(m)
		if ok {
			return true
		}
		select {
		case <-space:
		case <-sh.s.stop:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// offer is post without waiting: false, and m dropped, where its
// stream's lane is full or the service stopped.
func (sh *shard) offer(m msg) bool {
	if sh.s.manual {
		sh.handle(m)
		sh.finish(m.at)
		return true
	}
	if sh.s.isClosed() {
		return false
	}
	ok, _ := sh.in.put(m)
	return ok
}

// loop is the shard's goroutine: it serves messages and due hubs until the
// service stops.
func (sh *shard) loop() {
	defer sh.s.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := sh.s.o.Clock()
		if !sh.full() {
			sh.serveDue(now, dueBatch)
		}
		sh.finish(now)
		wait := time.Hour
		if at, ok := sh.due.peek(); ok && !sh.full() {
			wait = max(at.Sub(sh.s.o.Clock()), 0)
		}
		timer.Reset(wait)
		select {
		case <-sh.s.stop:
			return
		case m := <-sh.results:
			sh.handle(m)
			continue
		case m := <-sh.ctl:
			sh.handle(m)
			continue
		default:
		}
		if sh.takeBatch() {
			runtime.Gosched() // as interleave does, between batches
			continue
		}
		wake := sh.in.wake
		if sh.xfull() {
			wake = nil // a result comes first
		}
		select {
		case <-sh.s.stop:
			return
		case <-timer.C:
		case m := <-sh.results:
			sh.handle(m)
		case m := <-sh.ctl:
			sh.handle(m)
		case <-wake:
			sh.takeBatch()
		}
	}
}

// takeBatch handles a batch of the streams' messages, in the intake's
// order (only small reports while the store is behind on the others);
// false if none was taken (none waits, or the store is behind).
func (sh *shard) takeBatch() bool {
	if sh.xfull() {
		return false
	}
	express := sh.full()
	n, usages := 0, uint64(0)
	for ; n < batchSize && usages < batchUsages; n++ {
		m, ok := sh.in.take(express)
		if !ok {
			break
		}
		usages += cost(&m)
		sh.handle(m)
	}
	return n > 0
}

// full reports whether the store is behind: a call is out, and the next
// has opsHigh operations already.
func (sh *shard) full() bool { return sh.calling && len(sh.ops) >= opsHigh }

// xfull is full for the express calls.
func (sh *shard) xfull() bool { return sh.xcalling && len(sh.xops) >= expressHigh }

// handle takes one message.
func (sh *shard) handle(m msg) {
	if !sh.s.manual && m.light && express(&m) {
		// What a light stream's ack or close makes dirty leaves in an
		// express call: it may have been taken while the store is behind.
		defer sh.expressAll(sh.byStream[m.st])
	}
	switch m.kind {
	case msgReport:
		for i := range m.usages {
			sh.report(m.st, m.info, m.sweep, m.at, &m.usages[i])
		}
		// A small report is express (a large report's few young buckets
		// come as one: Stream.Report).
		if !sh.s.manual && express(&m) {
			for i := range m.usages {
				if h := sh.hubs[m.usages[i].key]; h != nil {
					sh.markExpress(h)
				}
			}
		}
	case msgClose:
		sh.closeStream(m.st, m.light, m.at)
	case msgResult:
		sh.result(m.call)
	case msgBoard:
		sh.boardResult(m.board)
	case msgDrain:
		sh.drain(sh.s.o.Clock())
		close(m.done)
	case msgAck:
		sh.acked(m.st, m.upTo, m.at)
	}
}

// expressAll makes the operations of the hubs of hs that wait to be
// served leave in an express call.
func (sh *shard) expressAll(hs []*hub) {
	for _, h := range hs {
		sh.markExpress(h)
	}
}

// finish serves the hubs that got news, then sends what they decided:
// actions to the streams (one Push per stream), and the store call.
func (sh *shard) finish(now time.Time) {
	if cfg := sh.s.rules.Config(); cfg != sh.cfg {
		sh.cfg = cfg
		for _, h := range sh.hubs {
			sh.markDirty(h)
		}
	}
	for len(sh.dirty) > 0 || sh.s.manual && len(sh.ops) > 0 {
		dirty := sh.dirty
		sh.dirty = nil
		for i, h := range dirty {
			if !h.queued {
				continue // served already (express)
			}
			h.queued = false
			sh.serve(h, now)
			if !sh.s.manual && i%expressEvery == expressEvery-1 {
				sh.interleave()
			}
		}
		if sh.s.manual && len(sh.ops) > 0 {
			sh.callNow() // may make more hubs dirty, served in this loop
		}
	}
	for st, acts := range sh.pushes {
		st.sink.Push(acts)
		delete(sh.pushes, st)
	}
	if !sh.s.manual && !sh.calling && len(sh.ops) > 0 {
		sh.callAsync(false)
	}
	if !sh.s.manual && !sh.xcalling && len(sh.xops) > 0 {
		sh.callAsync(true)
	}
	clear(sh.xdirty) // every hub queued is served by now
	sh.xdirty = sh.xdirty[:0]
	sh.exchange(now)
}

// serveDue serves the hubs whose time has come, at most n of them (the
// rest stay due, the earliest first).
func (sh *shard) serveDue(now time.Time, n int) {
	for n > 0 {
		at, ok := sh.due.peek()
		if !ok || at.After(now) {
			return
		}
		e := heap.Pop(&sh.due).(dueEntry)
		sh.markDirty(e.h)
		n--
	}
}

// markExpress makes h, if queued, leave in an express call, served at the
// next interleave.
func (sh *shard) markExpress(h *hub) {
	if h.queued && !h.express {
		h.express = true
		sh.xdirty = append(sh.xdirty, h)
	}
}

func (sh *shard) markDirty(h *hub) {
	if !h.queued && !h.gone {
		h.queued = true
		sh.dirty = append(sh.dirty, h)
	}
}

// schedule makes h due at at (replacing an earlier schedule). A hub has
// one entry in the due heap at most, moved when it is rescheduled and
// removed when it is forgotten: stale entries, skipped when popped, kept
// every hub rescheduled or forgotten in the last hour reachable (a
// bucket flood's forgotten hubs, with their buckets and reporters, an
// hour after their gauge said they were gone).
func (sh *shard) schedule(h *hub, at time.Time) {
	if h.due == 0 {
		heap.Push(&sh.due, dueEntry{at: at, h: h})
		return
	}
	if e := &sh.due[h.due-1]; !e.at.Equal(at) {
		e.at = at
		heap.Fix(&sh.due, h.due-1)
	}
}

// dueBy makes h due at at, unless it is due earlier.
func (sh *shard) dueBy(h *hub, at time.Time) {
	if h.due == 0 || sh.due[h.due-1].at.After(at) {
		sh.schedule(h, at)
	}
}

// unschedule takes h out of the due heap.
func (sh *shard) unschedule(h *hub) {
	if h.due > 0 {
		heap.Remove(&sh.due, h.due-1)
	}
}

func (sh *shard) push(st *Stream, a Action) {
	sh.pushes[st] = append(sh.pushes[st], a)
}

// dueEntry is a hub's next serve.
type dueEntry struct {
	at time.Time
	h  *hub
}

// dueHeap keeps each hub's place in it (hub.due) as entries move.
type dueHeap []dueEntry

func (d dueHeap) Len() int           { return len(d) }
func (d dueHeap) Less(i, j int) bool { return d[i].at.Before(d[j].at) }
func (d dueHeap) Swap(i, j int) {
	d[i], d[j] = d[j], d[i]
	d[i].h.due, d[j].h.due = i+1, j+1
}
func (d *dueHeap) Push(x any) {
	e := x.(dueEntry)
	*d = append(*d, e)
	e.h.due = len(*d)
}
func (d *dueHeap) Pop() any {
	old := *d
	e := old[len(old)-1]
	old[len(old)-1] = dueEntry{}
	*d = old[:len(old)-1]
	e.h.due = 0
	return e
}

func (d dueHeap) peek() (time.Time, bool) {
	if len(d) == 0 {
		return time.Time{}, false
	}
	return d[0].at, true
}

// pendingOp is one store operation of a hub and what it is for.
type pendingOp struct {
	h      *hub
	window int64
	op     engine.CounterOp
}

// call is one store call of a shard.
type call struct {
	ops     []pendingOp
	express bool
	// err is what failed ops[failed:] (the rest were done).
	err    error
	failed int
}

// callAsync makes the waiting operations (the express ones, with express)
// one store call on a goroutine the service waits for; its answer comes
// back as a message.
func (sh *shard) callAsync(express bool) {
	c := &call{ops: sh.ops, express: express}
	if express {
		c.ops, sh.xops, sh.xcalling = sh.xops, sh.takeSpare(), true
	} else {
		sh.ops, sh.calling = sh.takeSpare(), true
	}
	sh.s.wg.Add(1)
	go func() {
		defer sh.s.wg.Done()
		c.failed, c.err = sh.s.apply(c.ops)
		select {
		case sh.results <- msg{kind: msgResult, call: c}:
		case <-sh.s.stop:
		}
	}()
}

// callNow makes the waiting operations one store call on this goroutine
// (manual services).
func (sh *shard) callNow() {
	c := &call{ops: sh.ops}
	sh.ops = sh.takeSpare()
	c.failed, c.err = sh.s.apply(c.ops)
	sh.result(c)
}

// applyChunk bounds the operations of one Counter call: a counter
// shard serves a call's operations for it as one message, so an express
// call's (and RLS decisions') waited behind a flood's thousands.
const applyChunk = 128

// apply makes ops Counter calls of at most applyChunk operations, one
// after the other, within the call timeout. When one fails, it and the
// ones after it are not done: it returns the index of its first
// operation and the error (len(ops) and nil when all were done).
func (s *Service) apply(ops []pendingOp) (int, error) {
	if len(ops) == 0 {
		return 0, nil
	}
	// One chunk's array, not the call's: a flood's calls are thousands
	// of operations.
	cops := make([]engine.CounterOp, 0, min(len(ops), applyChunk))
	ctx, cancel := context.WithTimeout(context.Background(), s.o.CallTimeout)
	defer cancel()
	for from := 0; from < len(ops); from += applyChunk {
		to := min(from+applyChunk, len(ops))
		cops = cops[:0]
		for i := from; i < to; i++ {
			cops = append(cops, ops[i].op)
		}
		if err := s.counter.Apply(ctx, cops, nil); err != nil {
			// This chunk and the ones after it are not booked. One given
			// up on may still be counted by the store later: that is
			// under-admission, never over.
			return from, err
		}
		for i := from; i < to; i++ {
			ops[i].op.After = cops[i-from].After
		}
	}
	return len(ops), nil
}

// result books what a store call did.
func (sh *shard) result(c *call) {
	if c.express {
		sh.xcalling = false
	} else {
		sh.calling = false
	}
	now := sh.s.o.Clock()
	if c.err != nil {
		sh.s.st.reserveErrors.Inc()
		sh.s.o.logf("rlqs: reserving quota: %v", c.err)
	}
	for i := range c.ops {
		p := &c.ops[i]
		var err error
		if i >= c.failed {
			err = c.err
		}
		p.h.bookOp(sh, p, err, now)
		if c.express {
			sh.markExpress(p.h) // answered in the next interleave
		}
	}
	sh.keepSpare(c.ops)
	c.ops = nil
}

// maxSpare bounds the array a shard keeps between calls: what a backlog's
// largest call needed is not kept for good.
const maxSpare = 8 * opsHigh

// takeSpare is the kept array, emptied, or nil.
func (sh *shard) takeSpare() []pendingOp {
	ops := sh.spare
	sh.spare = nil
	return ops
}

// keepSpare keeps ops' array for a later call, cleared so that it holds
// no hub.
func (sh *shard) keepSpare(ops []pendingOp) {
	if cap(ops) > maxSpare || cap(ops) <= cap(sh.spare) {
		return
	}
	clear(ops)
	sh.spare = ops[:0]
}
