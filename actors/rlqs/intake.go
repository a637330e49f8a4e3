package rlqs

import (
	"container/heap"
	"sync"
)

// intake is what waits for a shard from the streams: one lane per stream,
// served in start-time fair queuing order (a message starts where its
// lane's previous one finished, or at the virtual time if the lane was
// idle; it finishes its usages later; the earliest start is served first,
// the earliest finish among equal starts), so that a stream with one
// small report is served next, not after every report a flood of streams
// queued before it. A single channel served its blocked senders first
// come, first served: the probe's one usage waited behind every flood
// stream's thousand. Ordering by finish alone (self-clocked fair queuing)
// is not enough either: a flood's lanes, all started together, share a
// finish tag below the probe's, and it waited for one report of each.
//
// Back-pressure stays: a stream has at most laneSize messages waiting for
// a shard, and its owner waits for room (its Envoy's HTTP/2 window fills
// in turn). A stream's own messages (reports, an ack, its close) keep
// their order: they share its lane.
type intake struct {
	mu    sync.Mutex
	lanes map[*Stream]*lane
	// ready are the lanes with messages, the smallest head tag first.
	ready laneHeap
	// vtime is the start of the message taken last: a lane that was idle
	// starts from it, so idling earns no credit over the streams that
	// kept the shard busy.
	vtime uint64
	// wake tells the shard's goroutine that a lane got a message.
	wake chan struct{}
}

// laneSize bounds the messages of one stream waiting for a shard.
const laneSize = 4

// lane is one stream's messages waiting for a shard.
type lane struct {
	st   *Stream
	q    []tagged
	last uint64 // where the lane's last message queued finishes
	idx  int    // in ready; -1 while the lane is empty
	// space tells a stream's owner waiting for room that a message was
	// taken.
	space chan struct{}
}

type tagged struct {
	m             msg
	start, finish uint64
}

func newIntake() *intake {
	return &intake{lanes: make(map[*Stream]*lane), wake: make(chan struct{}, 1)}
}

// cost is what a message takes of the shard: its usages (a close or an
// ack walks the stream's hubs, but is one per report at most).
func cost(m *msg) uint64 {
	return uint64(max(len(m.usages), 1))
}

// put queues m in its stream's lane; when the lane is full, it returns
// false and a channel that tells when to try again.
func (in *intake) put(m msg) (bool, <-chan struct{}) {
	in.mu.Lock()
	defer in.mu.Unlock()
	l := in.lanes[m.st]
	if l == nil {
		l = &lane{st: m.st, idx: -1, space: make(chan struct{}, 1)}
		in.lanes[m.st] = l
	}
	if len(l.q) >= laneSize {
		return false, l.space
	}
	start := max(in.vtime, l.last)
	l.last = start + cost(&m)
	l.q = append(l.q, tagged{m: m, start: start, finish: l.last})
	if l.idx < 0 {
		heap.Push(&in.ready, l)
	}
	select {
	case in.wake <- struct{}{}:
	default:
	}
	return true, nil
}

// take removes the waiting message that starts first; false if none
// waits.
func (in *intake) take() (msg, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.ready) == 0 {
		return msg{}, false
	}
	l := in.ready[0]
	e := l.q[0]
	n := copy(l.q, l.q[1:])
	l.q[n] = tagged{}
	l.q = l.q[:n]
	in.vtime = max(in.vtime, e.start)
	if n == 0 {
		heap.Pop(&in.ready)
		if e.m.kind == msgClose {
			delete(in.lanes, l.st) // its last message here
		}
	} else {
		heap.Fix(&in.ready, 0)
	}
	select {
	case l.space <- struct{}{}:
	default:
	}
	return e.m, true
}

// laneHeap orders lanes by their first message's start, then finish.
type laneHeap []*lane

func (h laneHeap) Len() int { return len(h) }
func (h laneHeap) Less(i, j int) bool {
	a, b := &h[i].q[0], &h[j].q[0]
	return a.start < b.start || a.start == b.start && a.finish < b.finish
}
func (h laneHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *laneHeap) Push(x any) {
	l := x.(*lane)
	l.idx = len(*h)
	*h = append(*h, l)
}
func (h *laneHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.idx = -1
	return l
}
