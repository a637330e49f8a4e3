package quota

import "runtime"

// expressEvery is how many hubs a shard serves in a row before it looks
// for express work (interleave): serving the hundred hubs a flood's store
// answer woke, or a batch of its new buckets, took 100-250 ms on a loaded
// machine, and a probe's report, or the answer to its express call,
// waited for all of them.
const expressEvery = 16

// interleave does the express work that waits, in the middle of serving
// a backlog of hubs: the store answers that came back (an express one
// wakes its hubs as express), the small reports and light streams' acks
// the intake has (while the express calls keep up), then serves the
// express hubs at once, sends their actions and their store call. They
// are planned at the time they are served, not when the backlog's serve
// began: an assignment is counted from when it was decided.
func (sh *shard) interleave() {
	// Let the goroutines this shard woke (a probe's stream loop, an
	// express call) and the connections' readers run before it goes on
	// with the backlog: a shard that never blocks under a flood otherwise
	// holds its core until it is preempted, 10 ms at a time, and a light
	// stream's report passes through several goroutines, each waiting
	// behind such turns (a quiet machine's flood probe: mean 24-28 ms,
	// 8-10 of ~50 probes over 50 ms before; 10-24 ms and 3-7 after).
	runtime.Gosched()
	for done := false; !done; {
		select {
		case m := <-sh.results:
			sh.handle(m)
		default:
			done = true
		}
	}
	for n := 0; n < batchSize && !sh.xfull(); n++ {
		m, ok := sh.in.take(true)
		if !ok {
			break
		}
		sh.handle(m)
	}
	served := false
	now := sh.s.o.Clock()
	for _, h := range sh.xdirty {
		if h.queued && h.express {
			h.queued = false
			sh.serve(h, now)
			served = true
		}
	}
	clear(sh.xdirty)
	sh.xdirty = sh.xdirty[:0]
	if served {
		for st, acts := range sh.pushes {
			st.sink.Push(acts)
			delete(sh.pushes, st)
		}
	}
	// An express hub served in the backlog's own order (a large report's
	// young bucket is its first) left its operations here too: they go
	// now, not after the rest of the backlog (a new bucket's reservation
	// waited for a whole batch of 256 hubs to be planned, 25-40 ms).
	if !sh.xcalling && len(sh.xops) > 0 {
		sh.callAsync(true)
	}
}
