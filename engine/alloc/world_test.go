package alloc_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/alloc"
)

// The world below drives planners (one hub per replica, all on one
// bucket) with greedy Envoys written from Envoy's filter source, in steps
// of simulated time, and checks on every window that the Envoys and the
// RLS callers together never admit more than the limit.
//
// The Envoys spend every token they get, the moment they get it; an
// assignment that lapses falls back to ALLOW_ALL (Envoy's default
// no_assignment_behavior), which a greedy Envoy turns into the whole
// limit at once: a lapse is an over. Until its first assignment (after a
// restart too) an Envoy denies: what Envoy admits before sluice could
// answer is not the planner's to pay for (the fleet simulator measures
// it). Messages take up to the delivery bound each way; store calls up to
// 20 ms; streams are cut and reopened at the Envoy's next report timer,
// to any replica; Envoys restart; replicas publish their claims to each
// other late.

var traceWorld = os.Getenv("WORLD_TRACE") != ""

type clientKind int

const (
	newest    clientKind = iota // global client: equal bucket kept, replaced at its fill ratio, whole-second time_elapsed
	olderGlob                   // global client: a replaced bucket starts full
	perWorker                   // per-worker client: every assignment a new full bucket
)

type wBucket struct {
	strat      alloc.Strategy
	tokens     float64
	last       int64
	got        int64
	expires    int64
	hasAssign  bool
	everAssign bool
}

type wEnvoy struct {
	kind    clientKind
	period  int64
	next    int64 // report timer
	stream  int   // id, 0: none
	opened  int64
	replica int
	b       wBucket
	allowed uint64
	denied  uint64
	lastRep int64
	demand  float64 // requests per second; Inf: greedy
	carry   float64
}

type wMsg struct {
	at     int64
	stream int
	strat  alloc.Strategy
	ttl    time.Duration
}

type wReport struct {
	at      int64
	stream  int
	replica int
	allowed uint64
	denied  uint64
	elapsed time.Duration
	kind    clientKind
}

type wReporter struct {
	alloc.Reporter
	stream   int
	lastRep  int64
	periodic int
	gaps     []time.Duration
}

type wOp struct {
	at      int64
	window  int64
	n       uint64
	reserve bool
	replica int
}

type wReplica struct {
	p         *alloc.Planner
	reps      []wReporter
	held      map[int64]uint64
	inflight  map[int64]uint64
	full      map[int64]int64
	next      int64
	dirty     bool
	claims    []alloc.Claim
	overhead  float64
	published int64
	down      bool
	out       alloc.Output
}

type world struct {
	t        *testing.T
	rng      *rand.Rand
	o        alloc.Options
	now      int64
	window   int64
	limit    uint64
	plan     alloc.Plan
	counter  map[int64]uint64
	admitted map[int64]uint64
	envoys   []*wEnvoy
	replicas []*wReplica
	toEnvoy  []wMsg
	toServer []wReport
	ops      []wOp
	closes   []wReport // a stream's end, as the replica learns it
	nextID   int
	streamOf map[int]int // stream → envoy
	rls      float64     // RLS hits per second
	overs    int
	lapses   int
	stats    struct{ changes, renewals, denies int }
}

func (w *world) delay() int64 { return w.rng.Int64N(int64(w.o.Delivery)) }

func (w *world) open(e *wEnvoy, i int) {
	w.nextID++
	e.opened = w.now
	e.stream = w.nextID
	w.streamOf[e.stream] = i
	live := []int{}
	for j, r := range w.replicas {
		if !r.down {
			live = append(live, j)
		}
	}
	e.replica = live[w.rng.IntN(len(live))]
}

// cut ends e's stream: its replica learns it later; what was on its way to
// the Envoy is lost.
func (w *world) cut(e *wEnvoy) {
	if e.stream == 0 {
		return
	}
	w.closes = append(w.closes, wReport{at: w.now + w.delay(), stream: e.stream, replica: e.replica})
	delete(w.streamOf, e.stream)
	e.stream = 0
}

func (w *world) report(e *wEnvoy, i int) {
	if e.stream == 0 {
		w.open(e, i)
	}
	el := time.Duration(w.now - e.lastRep)
	if e.kind != perWorker {
		el = el.Truncate(time.Second)
	}
	w.toServer = append(w.toServer, wReport{at: w.now + w.delay(), stream: e.stream, replica: e.replica,
		allowed: e.allowed, denied: e.denied, elapsed: el, kind: e.kind})
	e.allowed, e.denied, e.lastRep = 0, 0, w.now
}

// receive applies an assignment as the Envoy's client version does.
func (w *world) receive(e *wEnvoy, m wMsg) {
	b := &e.b
	w.refill(b)
	old := b.strat
	b.strat = m.strat
	if m.strat.Kind == alloc.TokenBucket {
		equal := b.hasAssign && old.Kind == alloc.TokenBucket && alloc.EnvoyEqual(old, m.strat)
		switch {
		case e.kind == perWorker || !equal:
			tokens := float64(m.strat.MaxTokens)
			if e.kind == newest && b.hasAssign && old.Kind == alloc.TokenBucket && old.MaxTokens > 0 {
				tokens = math.Floor(float64(m.strat.MaxTokens) * (b.tokens / float64(old.MaxTokens)))
			}
			b.tokens = tokens
		}
		if equal && e.kind != perWorker {
			b.strat = old // Envoy keeps the bucket it has (and its rate)
		}
	}
	b.last, b.got = w.now, w.now
	b.expires = w.now + int64(m.ttl.Truncate(time.Second))
	b.hasAssign, b.everAssign = true, true
}

func (w *world) refill(b *wBucket) {
	if b.hasAssign && b.strat.Kind == alloc.TokenBucket {
		b.tokens = min(float64(b.strat.MaxTokens), b.tokens+b.strat.Rate()*float64(w.now-b.last)/1e9)
	}
	b.last = w.now
}

// admit lets e's requests of this step through.
func (w *world) admit(e *wEnvoy, dt int64) {
	b := &e.b
	if b.hasAssign && w.now >= b.expires {
		b.hasAssign = false // expired: no_assignment_behavior, ALLOW_ALL
		if b.everAssign {
			w.lapses++
			w.t.Logf("t=%.3f: envoy (kind %d, stream %d, replica %d) lapsed; its last assignment arrived at %.3f: %+v",
				float64(w.now%(100*sec))/1e9, e.kind, e.stream, e.replica, float64(b.got%(100*sec))/1e9, b.strat)
		}
	}
	want := math.Inf(1)
	if !math.IsInf(e.demand, 1) {
		e.carry += e.demand * float64(dt) / 1e9
		want = math.Floor(e.carry)
		e.carry -= want
	}
	var got float64
	switch {
	case !b.hasAssign && b.everAssign:
		got = min(want, float64(w.limit)*2) // ALLOW_ALL: greedy means too many
	case !b.hasAssign:
		got = 0
	case b.strat.Kind == alloc.AllowAll:
		got = min(want, float64(w.limit)*2)
	case b.strat.Kind == alloc.TokenBucket:
		w.refill(b)
		got = min(want, math.Floor(b.tokens))
		b.tokens -= got
	}
	if !math.IsInf(want, 1) && want > got {
		e.denied += uint64(want - got)
	}
	e.allowed += uint64(got)
	w.admitted[w.windowOf(w.now)] += uint64(got)
}

func (w *world) windowOf(t int64) int64 { return t - t%w.window }

func (w *world) rlsStep(dt int64) {
	hits := w.rng.Float64() * 2 * w.rls * float64(dt) / 1e9
	n := uint64(hits)
	ws := w.windowOf(w.now)
	before := w.counter[ws]
	w.counter[ws] += n
	if before < w.limit {
		w.admitted[ws] += min(n, w.limit-before)
	}
}

func (w *world) applyOp(op wOp) {
	r := w.replicas[op.replica]
	if !op.reserve {
		w.counter[op.window] -= min(op.n, w.counter[op.window])
		return
	}
	w.counter[op.window] += op.n
	cop := engine.CounterOp{Hits: op.n, After: w.counter[op.window]}
	g, excess := engine.Granted(&cop, w.limit)
	w.counter[op.window] -= excess
	// The replica learns it a little later; here at once, as the answer
	// is what the store did.
	r.inflight[op.window] -= min(op.n, r.inflight[op.window])
	if op.window >= w.windowOf(w.now) {
		r.held[op.window] += g
	} else {
		w.counter[op.window] -= min(g, w.counter[op.window])
	}
	if g < op.n {
		r.full[op.window] = w.now // not asked again for a while
	}
	r.dirty = true // what waited for it is decided now
}

func (w *world) serverReport(m wReport) {
	r := w.replicas[m.replica]
	if r.down {
		return
	}
	var rep *wReporter
	for i := range r.reps {
		if r.reps[i].stream == m.stream {
			rep = &r.reps[i]
		}
	}
	if rep == nil {
		if _, open := w.streamOf[m.stream]; !open {
			return // the stream ended meanwhile
		}
		r.reps = append(r.reps, wReporter{Reporter: alloc.Reporter{Live: true, Refill: true}, stream: m.stream})
		rep = &r.reps[len(r.reps)-1]
	}
	if !rep.Live {
		return
	}
	var observed time.Duration
	if rep.lastRep != 0 {
		observed = time.Duration(w.now - rep.lastRep)
		rep.periodic++
		rep.gaps = append(rep.gaps, time.Duration(observed))
		if len(rep.gaps) > 4 {
			rep.gaps = rep.gaps[1:]
		}
		if rep.periodic >= 2 {
			rep.Period = slices.Max(rep.gaps[1:])
		}
		if m.elapsed%time.Second != 0 {
			rep.Refill = true
		} else if m.elapsed > 0 && m.kind != perWorker {
			rep.Refill = false // whole seconds: the newest global client
		}
	}
	rep.lastRep = w.now
	if c := alloc.Rate(m.allowed, m.denied, m.elapsed, observed); c.Known || !rep.Claim.Known {
		rep.Claim = c
	}
	alloc.Confirm(&rep.Reporter, w.now, w.o)
	r.dirty = true
}

func (w *world) serverClose(m wReport) {
	r := w.replicas[m.replica]
	for i := range r.reps {
		if r.reps[i].stream == m.stream {
			r.reps[i].Live = false
			r.dirty = true
		}
	}
}

// planReplica runs replica j's planner and carries out what it decides.
func (w *world) planReplica(j int) {
	r := w.replicas[j]
	if r.down {
		return
	}
	from := w.windowOf(w.now)
	in := alloc.Input{Now: w.now, Plan: w.plan, Window: w.window}
	reps := make([]alloc.Reporter, len(r.reps))
	kept := r.reps[:0]
	for _, rep := range r.reps {
		alloc.Forget(&rep.Reporter, from)
		if !rep.Live && len(rep.Segs) == 0 {
			continue
		}
		kept = append(kept, rep)
	}
	r.reps = kept
	reps = reps[:len(r.reps)]
	for i := range r.reps {
		reps[i] = r.reps[i].Reporter
	}
	in.Reporters = reps
	for ws, n := range r.held {
		if ws < from {
			delete(r.held, ws)
			continue
		}
		in.Held = append(in.Held, alloc.Hold{Window: ws, N: n})
	}
	for ws, n := range r.inflight {
		if n > 0 {
			in.InFlight = append(in.InFlight, alloc.Hold{Window: ws, N: n})
		}
	}
	for _, at := range r.full {
		in.Full = in.Full || w.now-at < int64(alloc.RetryShort)
	}
	for k, o := range w.replicas {
		if k != j && !o.down && w.now-o.published < 3*sec {
			in.Others.Claims = append(in.Others.Claims, o.claims...)
			in.Others.Overhead += o.overhead
		}
	}
	r.p.Decide(&in, &r.out)
	if traceWorld {
		fmt.Printf("t=%.3f replica %d plan: %s", float64(w.now%(100*sec))/1e9, j, dump(&in, &r.out))
		fmt.Print(r.p.DebugAsks())
		for i, rep := range r.reps {
			fmt.Printf(" r%d=stream%d period=%v refill=%v renewAt=%.3f\n", i, rep.stream, rep.Period, rep.Refill, float64(w.o.RenewAt(&rep.Reporter)%(100*sec))/1e9)
		}
		fmt.Printf("  reserve %v release %v next %.3f short=%v\n", r.out.Reserve, r.out.Release, float64(r.out.Next%(100*sec))/1e9, r.out.Short)
	}
	for _, c := range r.out.Changes {
		rep := &r.reps[c.R]
		alloc.Commit(&rep.Reporter, c, w.now, w.o)
		if _, open := w.streamOf[rep.stream]; open {
			w.toEnvoy = append(w.toEnvoy, wMsg{at: w.now + w.delay(), stream: rep.stream, strat: c.Strat, ttl: c.TTL})
		}
		w.stats.changes++
		if !c.Replace {
			w.stats.renewals++
		}
		if c.Strat.Kind == alloc.DenyAll {
			w.stats.denies++
		}
	}
	if r.out.Overcommitted {
		w.t.Errorf("replica %d overcommitted at %v", j, time.Duration(w.now%(100*sec)))
	}
	for _, h := range r.out.Reserve {
		if at, ok := r.full[h.Window]; ok && w.now-at < int64(alloc.RetryShort) {
			continue
		}
		r.inflight[h.Window] += h.N
		w.ops = append(w.ops, wOp{at: w.now + w.rng.Int64N(20*int64(time.Millisecond)), window: h.Window, n: h.N, reserve: true, replica: j})
	}
	for _, h := range r.out.Release {
		r.held[h.Window] -= min(h.N, r.held[h.Window])
		w.ops = append(w.ops, wOp{at: w.now + w.rng.Int64N(20*int64(time.Millisecond)), window: h.Window, n: h.N, replica: j})
	}
	r.claims = append(r.claims[:0], r.out.Claims...)
	r.overhead = r.out.Overhead
	r.published = w.now
	r.next = r.out.Next
	r.dirty = false
}

// stop takes replica j away: its streams end (the Envoys reopen them to
// another replica at their next report); what it held stays counted until
// its windows end.
func (w *world) stop(j int) {
	w.replicas[j].down = true
	for _, e := range w.envoys {
		if e.stream != 0 && e.replica == j {
			delete(w.streamOf, e.stream)
			e.stream = 0
		}
	}
}

type worldConfig struct {
	seed             uint64
	envoys, replicas int
	window           time.Duration
	limit            uint64
	rls              float64
	greedy           bool
	cuts, restarts   bool
	stopReplica      bool
	seconds          int
}

func runWorld(t *testing.T, c worldConfig) *world {
	rng := rand.New(rand.NewPCG(c.seed, 7))
	o := alloc.DefaultOptions()
	o.Spare, o.Headroom, o.FirstShare, o.Burst, o.Hysteresis = 0.5, 0.02, 0.5, 10*time.Millisecond, 0.02
	w := &world{t: t, rng: rng, o: o, now: 1_700_000_000*sec + rng.Int64N(sec), window: int64(c.window), limit: c.limit,
		counter: map[int64]uint64{}, admitted: map[int64]uint64{}, streamOf: map[int]int{}, rls: c.rls}
	w.plan = alloc.Plan{Kind: alloc.PlanDivide, Limit: float64(c.limit) / c.window.Seconds()}
	for range c.replicas {
		w.replicas = append(w.replicas, &wReplica{p: &alloc.Planner{O: o}, held: map[int64]uint64{}, inflight: map[int64]uint64{}, full: map[int64]int64{}})
	}
	for i := range c.envoys {
		// Greedy: ten times the limit, so that the reports say so.
		e := &wEnvoy{kind: clientKind(rng.IntN(3)), demand: 10 * float64(c.limit) / c.window.Seconds()}
		e.period = 5 * sec
		if e.kind == perWorker {
			e.period = []int64{sec, 2 * sec, 5 * sec}[rng.IntN(3)]
		}
		if !c.greedy || rng.IntN(3) == 0 {
			e.demand = rng.Float64() * 2 * w.plan.Limit / float64(c.envoys)
		}
		e.next = w.now + rng.Int64N(e.period)
		e.lastRep = w.now
		w.envoys = append(w.envoys, e)
		w.open(e, i)
		w.report(e, i) // the subscription
	}
	const dt = int64(5 * time.Millisecond)
	end := w.now + int64(c.seconds)*sec
	stopAt := w.now + int64(c.seconds)*sec/2
	for ; w.now < end; w.now += dt {
		// Arrivals, in time order: the store, the reports, stream ends,
		// the assignments.
		slices.SortFunc(w.ops, func(a, b wOp) int { return int(a.at - b.at) })
		for len(w.ops) > 0 && w.ops[0].at <= w.now {
			w.applyOp(w.ops[0])
			w.ops = w.ops[1:]
		}
		keep := w.toServer[:0]
		for _, m := range w.toServer {
			if m.at <= w.now {
				w.serverReport(m)
			} else {
				keep = append(keep, m)
			}
		}
		w.toServer = keep
		keepC := w.closes[:0]
		for _, m := range w.closes {
			if m.at <= w.now {
				w.serverClose(m)
			} else {
				keepC = append(keepC, m)
			}
		}
		w.closes = keepC
		keepM := w.toEnvoy[:0]
		for _, m := range w.toEnvoy {
			if m.at > w.now {
				keepM = append(keepM, m)
				continue
			}
			if i, open := w.streamOf[m.stream]; open {
				w.receive(w.envoys[i], m)
			}
		}
		w.toEnvoy = keepM
		for j, r := range w.replicas {
			if r.dirty || w.now >= r.next {
				w.planReplica(j)
			}
		}
		for i, e := range w.envoys {
			if w.now >= e.next {
				w.report(e, i)
				e.next += e.period
			}
			// A stream breaks at most once per report period: one broken
			// again before the Envoy was answered loses its assignments at
			// their TTL whatever the server does (the Envoy reopens it only
			// at its next report timer).
			healthy := e.stream != 0 && w.now-e.opened > e.period+sec &&
				!(c.stopReplica && w.now > stopAt-10*sec && w.now < stopAt+10*sec)
			switch {
			case c.cuts && healthy && rng.IntN(4000) == 0:
				w.cut(e)
			case c.restarts && healthy && rng.IntN(8000) == 0:
				w.cut(e)
				e.b = wBucket{}
				e.allowed, e.denied = 0, 0
				w.open(e, i)
				e.lastRep = w.now
				w.report(e, i)
			}
			w.admit(e, dt)
		}
		w.rlsStep(dt)
		if c.stopReplica && len(w.replicas) > 1 && w.now >= stopAt && !w.replicas[0].down {
			w.stop(0)
		}
	}
	for ws, n := range w.admitted {
		if n > w.limit {
			w.overs++
			if w.overs <= 3 {
				t.Errorf("window %v: %d admitted, limit %d", time.Duration(ws%(1000*sec)), n, w.limit)
			}
		}
	}
	return w
}

// TestWorldNeverOver runs random fleets against one to three replicas.
func TestWorldNeverOver(t *testing.T) {
	t.Parallel()
	cases := []worldConfig{
		{envoys: 10, replicas: 1, window: time.Second, limit: 1000, greedy: true},
		{envoys: 10, replicas: 1, window: time.Second, limit: 1000, greedy: true, cuts: true, restarts: true},
		{envoys: 6, replicas: 2, window: time.Second, limit: 1000, greedy: true, rls: 300, cuts: true},
		{envoys: 8, replicas: 3, window: time.Second, limit: 500, rls: 100, cuts: true, restarts: true, stopReplica: true},
		{envoys: 5, replicas: 2, window: time.Minute, limit: 6000, greedy: true, rls: 20, cuts: true},
		{envoys: 12, replicas: 1, window: time.Second, limit: 50, greedy: true, cuts: true},
	}
	seeds := 3
	if testing.Short() {
		seeds = 1
	}
	for ci, c := range cases {
		for s := range seeds {
			c := c
			c.seed, c.seconds = uint64(ci*100+s+1), 40
			t.Run(fmt.Sprintf("case%d/seed%d", ci, s), func(t *testing.T) {
				t.Parallel()
				w := runWorld(t, c)
				if w.lapses > 0 {
					t.Errorf("%d assignments lapsed to ALLOW_ALL", w.lapses)
				}
				used := 0.0
				for _, n := range w.admitted {
					used += float64(n)
				}
				var seq []uint64
				for ws := w.windowOf(w.now) - int64(c.seconds)*sec; ws < w.now; ws += w.window {
					seq = append(seq, w.admitted[ws])
				}
				t.Logf("admitted per window: %v", seq)
				t.Logf("admitted %.0f%% of the limit over the run; %d changes (%d renewals, %d DENY_ALL)",
					100*used/(float64(w.limit)*float64(c.seconds)*float64(time.Second)/float64(c.window)), w.stats.changes, w.stats.renewals, w.stats.denies)
			})
		}
	}
}
