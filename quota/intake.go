package quota

import (
	"container/heap"
	"math"
	"sync"
	"time"
)

// intake is what waits for a shard from the streams: one lane per stream,
// served least recent work first. A lane is charged its messages' usages
// when they are queued, and what it was charged fades by half for every
// halfLife usages the shard takes from any lane and for every halfTime
// that passes; the lane charged least is served next (its messages in
// order). A stream that reports one bucket now and then is served next,
// however many reports a flood of streams queued before it; a stream that
// stops asking fades back in.
//
// A new stream's first report is charged newLane besides: a stream
// already served goes before a burst of new ones unless it asked more
// than that lately. Ten thousand streams opened at once,
// each with one new bucket, were each charged less than a probe Envoy
// that had reported a bucket every 250 ms for a while (its charge did not
// fade while the shard was idle), and the probe waited for all of them
// (half a second); an existing stream's answers are not to wait for a
// burst of new ones. The charge is the stream's, not the lane's: an old
// stream's first bucket on a shard (a lane it never had) was charged as a
// new stream's and went behind the burst's 3,500 lanes queued there
// (344 ms).
//
// A single channel served its blocked senders first come, first served:
// the probe's one usage waited behind every flood stream's thousand.
// Fair-queuing tags were not enough either: a flood's lanes started
// together share a tag, and a probe whose own ack had moved its tag past
// theirs waited for one report of each (seconds on a busy machine).
//
// While the store is behind on the flood's operations, the shard takes
// only express messages (a small report, a light stream's ack or close),
// least charged lane first: small keeps the lanes whose next message is
// one.
//
// Back-pressure stays: a stream has at most laneSize messages waiting for
// a shard, and its owner waits for room (its Envoy's HTTP/2 window fills
// in turn). A stream's own messages (reports, an ack, its close) keep
// their order: they share its lane.
type intake struct {
	mu    sync.Mutex
	lanes map[*Stream]*lane
	// ready are the lanes with messages, the least charged first; small
	// those of them whose next message is a small report (express).
	ready laneHeap
	small laneHeap
	// Charges are kept in the scale of the last rebase: a charge made
	// after work usages were taken counts 2^(work/halfLife) of one made
	// then, which fades every older one alike and keeps ready's order.
	work  float64
	scale float64
	// clock and epoch: time fades charges too (halfTime), from epoch, the
	// last rebase.
	clock func() time.Time
	epoch time.Time
	// wake tells the shard's goroutine that a lane got a message.
	wake chan struct{}
}

const (
	// laneSize bounds the messages of one stream waiting for a shard.
	laneSize = 4
	// halfLife is how many usages taken halve what lanes were charged.
	halfLife = 1 << 16
	// halfTime is how long it takes what a lane was charged to halve.
	halfTime = time.Second
	// newLane is what a new stream's first report is charged
	// besides its usages: more than a light Envoy's steady charge (one
	// bucket every 250 ms: about 6), less than one chunk of a flood's
	// report (maxChunk), so a new Envoy still goes before a flood's
	// backlog.
	newLane = 16
	// rebaseAt is how much work and time (in half-lives) pass before
	// charges are rescaled, far from float64's range.
	rebaseAt = 256
)

// lane is one stream's messages waiting for a shard.
type lane struct {
	st *Stream
	q  []msg
	// charged is what its messages cost, faded (in the intake's scale).
	charged float64
	// idx is its place in ready, sidx in small (-1: not there).
	idx, sidx int
	// space tells a stream's owner waiting for room that a message was
	// taken.
	space chan struct{}
}

func newIntake(clock func() time.Time) *intake {
	return &intake{lanes: make(map[*Stream]*lane), small: laneHeap{small: true}, scale: 1, wake: make(chan struct{}, 1),
		clock: clock, epoch: clock()}
}

// cost is what a message is charged: its usages. An ack or a close costs
// nothing: a stream's transport sends one per flush at most, and charging
// them made a probe Envoy (one bucket a report, an ack after each answer)
// ask more than its share of a shard a thousand flood streams share.
func cost(m *msg) uint64 {
	return uint64(len(m.usages))
}

// put queues m in its stream's lane; when the lane is full, it returns
// false and a channel that tells when to try again.
func (in *intake) put(m msg) (bool, <-chan struct{}) {
	in.mu.Lock()
	defer in.mu.Unlock()
	l := in.lanes[m.st]
	in.fade(0)
	if l == nil {
		l = &lane{st: m.st, idx: -1, sidx: -1, space: make(chan struct{}, 1)}
		if m.opening {
			l.charged = newLane * in.scale
		}
		in.lanes[m.st] = l
	}
	if len(l.q) >= laneSize {
		return false, l.space
	}
	l.charged += float64(cost(&m)) * in.scale
	l.q = append(l.q, m)
	in.place(l)
	select {
	case in.wake <- struct{}{}:
	default:
	}
	return true, nil
}

// take removes the next message of the least charged lane; false if none
// waits. With express, it takes only a small report (express), from the
// least charged lane whose next message is one.
func (in *intake) take(express bool) (msg, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	h := &in.ready
	if express {
		h = &in.small
	}
	if len(h.ls) == 0 {
		return msg{}, false
	}
	l := h.ls[0]
	m := l.q[0]
	n := copy(l.q, l.q[1:])
	l.q[n] = msg{}
	l.q = l.q[:n]
	in.place(l)
	if n == 0 && m.kind == msgClose {
		delete(in.lanes, l.st) // its last message here
	}
	in.fade(cost(&m))
	select {
	case l.space <- struct{}{}:
	default:
	}
	return m, true
}

// place puts l where its messages say: in ready while it has any, in
// small while the next is a small report, at its charge.
func (in *intake) place(l *lane) {
	in.ready.set(l, len(l.q) > 0)
	in.small.set(l, len(l.q) > 0 && express(&l.q[0]))
}

// express reports whether m is served beside a flood's backlog (see
// shard.go): a small report, or the ack or close of a light stream (they
// touch every bucket of their stream; the probe Envoy's ack, queued
// before its next report, held that report back as long as the flood's
// store calls were behind).
func express(m *msg) bool {
	switch m.kind {
	case msgReport:
		return len(m.usages) <= expressUsages
	case msgAck, msgClose:
		return m.light
	}
	return false
}

// fade counts n usages taken, and the time passed: later charges weigh
// more, so earlier ones fade. Every lane is rescaled alike now and then
// (ready's order holds).
func (in *intake) fade(n uint64) {
	in.work += float64(n)
	now := in.clock()
	halves := in.work/halfLife + float64(now.Sub(in.epoch))/float64(halfTime)
	if halves >= rebaseAt {
		// Now's scale, which may have gone past float64's range after a
		// long idle time: every charge has faded to nothing then.
		scale := math.Exp2(halves)
		for _, l := range in.lanes {
			l.charged /= scale
		}
		in.work, in.epoch, halves = 0, now, 0
	}
	in.scale = math.Exp2(halves)
}

// laneHeap orders lanes by what they were charged; small tells which of
// a lane's places it keeps.
type laneHeap struct {
	ls    []*lane
	small bool
}

func (h *laneHeap) pos(l *lane) *int {
	if h.small {
		return &l.sidx
	}
	return &l.idx
}

// set puts l in h or takes it out, or fixes its place.
func (h *laneHeap) set(l *lane, in bool) {
	i := *h.pos(l)
	switch {
	case in && i < 0:
		heap.Push(h, l)
	case in:
		heap.Fix(h, i)
	case i >= 0:
		heap.Remove(h, i)
	}
}

func (h *laneHeap) Len() int           { return len(h.ls) }
func (h *laneHeap) Less(i, j int) bool { return h.ls[i].charged < h.ls[j].charged }
func (h *laneHeap) Swap(i, j int) {
	h.ls[i], h.ls[j] = h.ls[j], h.ls[i]
	*h.pos(h.ls[i]), *h.pos(h.ls[j]) = i, j
}
func (h *laneHeap) Push(x any) {
	l := x.(*lane)
	*h.pos(l) = len(h.ls)
	h.ls = append(h.ls, l)
}
func (h *laneHeap) Pop() any {
	old := h.ls
	l := old[len(old)-1]
	old[len(old)-1] = nil
	h.ls = old[:len(old)-1]
	*h.pos(l) = -1
	return l
}
