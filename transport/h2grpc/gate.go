package h2grpc

// The start gate: how many streaming calls start at once.
//
// A streaming method runs on a goroutine of its own, started as its
// HEADERS are read, and Go's scheduler has no priorities: the goroutines
// of ten thousand streams opened within a second, each setting up its
// call and its first message, filled the run queues (hundreds deep), and
// every goroutine an established stream woke (its connection's reader,
// its method, the quota shard's answer) waited behind them: a probe
// Envoy's report, answered in a millisecond otherwise, took 200-470 ms
// while the burst ramped up. With the gate, a call waits for one of a few
// slots before its goroutine exists: what waits is a list entry, not a
// runnable goroutine, and an established stream's goroutines find the run
// queues shorter (the native server's worst probe 27-142 ms in 17 of 18
// runs, 210 ms in one; the burst answered as fast as before, median
// 0.6-0.7 s). grpc-go's server starts the goroutine itself; there a new
// stream waits for a slot at its tap, on the connection's reader, until
// its handler starts (transport's setupTap), and again, parked, after its
// first message (guardedStream): worst probe 29-230 ms, against 77-249 ms
// with the second alone.
//
// A call holds its slot while it starts: until its method waits for a
// message that has not come, sends, or returns. A method blocked on
// something else holds its slot for hold at most, then the slot goes to
// the next call: the gate delays calls, it never stops them.

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The native server's gate: a few slots a core (a starting call is short
// work), and a slot taken back after 100 ms (a method stuck before its
// first receive delays the calls after it, once).
const (
	startSlotsPerProc = 4
	startHold         = 100 * time.Millisecond
)

// StartGate lets at most n calls start at once, the others in the order
// they came. Its zero value is not usable: NewStartGate.
type StartGate struct {
	hold time.Duration

	mu    sync.Mutex
	slots []gateSlot
	queue []*gateWaiter
	// armed: a timer will take back the slots held past hold.
	armed bool
}

type gateSlot struct {
	p     *Pass
	since time.Time
}

type gateWaiter struct {
	start func(*Pass)
}

// Pass is a starting call's slot; Done gives it back (once: later calls do
// nothing).
type Pass struct {
	g    *StartGate
	done atomic.Bool
}

// Done gives the slot back: the call has started.
func (p *Pass) Done() {
	if p == nil || !p.done.CompareAndSwap(false, true) {
		return
	}
	p.g.release(p)
}

// started gives st's start gate slot back, if it holds one.
func (st *stream) started() { st.pass.Swap(nil).Done() }

// NewDefaultStartGate is a gate as the native server's (for grpc-go's).
func NewDefaultStartGate() *StartGate {
	return NewStartGate(startSlotsPerProc*runtime.GOMAXPROCS(0), startHold)
}

// NewStartGate is a gate of n slots, each held hold at most.
func NewStartGate(n int, hold time.Duration) *StartGate {
	return &StartGate{hold: hold, slots: make([]gateSlot, max(n, 1))}
}

// start calls f with a pass now, or once a slot is free (on another
// goroutine then); f must not block. It returns the waiter to cancel, nil
// if f was called.
func (g *StartGate) start(f func(*Pass)) *gateWaiter {
	g.mu.Lock()
	if p := g.takeLocked(); p != nil {
		g.mu.Unlock()
		f(p)
		return nil
	}
	w := &gateWaiter{start: f}
	g.queue = append(g.queue, w)
	g.armLocked()
	g.mu.Unlock()
	return w
}

// Wait returns a pass once a slot is free, or ctx's error first.
func (g *StartGate) Wait(ctx context.Context) (*Pass, error) {
	ch := make(chan *Pass, 1)
	w := g.start(func(p *Pass) { ch <- p })
	if w == nil {
		return <-ch, nil
	}
	select {
	case p := <-ch:
		return p, nil
	case <-ctx.Done():
		if !g.cancel(w) {
			(<-ch).Done() // granted meanwhile: given back
		}
		return nil, ctx.Err()
	}
}

// cancel takes w out of the queue; false if it was granted a slot.
func (g *StartGate) cancel(w *gateWaiter) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, x := range g.queue {
		if x == w {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			return true
		}
	}
	return false
}

// takeLocked is a pass on a free slot, or nil.
func (g *StartGate) takeLocked() *Pass {
	for i := range g.slots {
		if g.slots[i].p == nil {
			p := &Pass{g: g}
			g.slots[i] = gateSlot{p: p, since: time.Now()}
			return p
		}
	}
	return nil
}

func (g *StartGate) release(p *Pass) {
	g.mu.Lock()
	for i := range g.slots {
		if g.slots[i].p == p {
			g.slots[i] = gateSlot{}
			break
		}
	}
	starts := g.grantLocked()
	g.mu.Unlock()
	run(starts)
}

// grantLocked gives the free slots to the first waiters; the caller runs
// what it returns once unlocked.
func (g *StartGate) grantLocked() []func() {
	var starts []func()
	for len(g.queue) > 0 {
		p := g.takeLocked()
		if p == nil {
			break
		}
		w := g.queue[0]
		g.queue[0] = nil
		g.queue = g.queue[1:]
		starts = append(starts, func() { w.start(p) })
	}
	if len(g.queue) == 0 {
		g.queue = nil // the array a burst grew is not kept
	}
	return starts
}

func run(fs []func()) {
	for _, f := range fs {
		f()
	}
}

// armLocked makes sure a timer takes back the slots held past hold while
// calls wait (every slot is held then).
func (g *StartGate) armLocked() {
	if g.armed || len(g.queue) == 0 {
		return
	}
	oldest := g.slots[0].since
	for _, s := range g.slots {
		if s.p != nil && s.since.Before(oldest) {
			oldest = s.since
		}
	}
	g.armed = true
	time.AfterFunc(max(time.Until(oldest.Add(g.hold)), 0), g.expire)
}

// expire takes back the slots held past hold and gives them to the
// waiters.
func (g *StartGate) expire() {
	g.mu.Lock()
	g.armed = false
	now := time.Now()
	for i := range g.slots {
		if s := g.slots[i]; s.p != nil && now.Sub(s.since) >= g.hold {
			s.p.done.Store(true) // its Done does nothing now
			g.slots[i] = gateSlot{}
		}
	}
	starts := g.grantLocked()
	g.armLocked()
	g.mu.Unlock()
	run(starts)
}
