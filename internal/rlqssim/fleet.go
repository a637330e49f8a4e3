package rlqssim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
)

// FleetConfig is a fleet of simulated Envoys on the wall clock, each on
// real gRPC streams to real servers: the same filter as the simulation
// (Filter), for the end-to-end tests and loadtest/rlqs.
type FleetConfig struct {
	// Targets are the servers (host:port); an Envoy opens each stream to
	// the next one that is not down, round robin.
	Targets  []string
	Domain   string
	Buckets  []map[string]string
	Envoys   []EnvoySpec
	Demand   Demand
	Arrivals Arrivals
	Seed     uint64
	Behaviors
	// Tick is how often an Envoy takes the requests that arrived (10 ms
	// by default); each is decided at its own arrival time.
	Tick        time.Duration
	DialOptions []grpc.DialOption
	Logf        func(format string, args ...any)
}

// Fleet is a running (or finished) fleet.
type Fleet struct {
	cfg   FleetConfig
	ids   []*rlqsv3.BucketId
	index map[string]int
	down  []atomic.Bool
	start time.Time
	// startNs is start for other goroutines (Start).
	startNs atomic.Int64

	envoys []*fenvoy

	mu       sync.Mutex
	admitted [][][]uint64 // [bucket][envoy][second]
	denied   [][][]uint64
	// unassigned is what buckets admitted before their first assignment
	// (Unassigned), not in admitted.
	unassigned [][][]uint64
	lapses     int
	lapseLog   []string
	stats      VStats
}

type fenvoy struct {
	fleet   *Fleet
	idx     int
	workers []*fworker
	conns   []*grpc.ClientConn
	target  int
	mu      sync.Mutex // conns, target
}

type fworker struct {
	e   *fenvoy
	idx int

	mu        sync.Mutex // f, stream, timer
	f         *Filter
	stream    *fstream
	timer     time.Time
	triedOpen bool
	opened    time.Time
	acc       []accumulator
	rng       *rand.Rand
	// outgoing are the reports to send once mu is released: a send may
	// wait for the stream's window, which the receiver (it takes mu)
	// gives back.
	outgoing []outgoing
}

type outgoing struct {
	st *fstream
	m  *rlqsv3.RateLimitQuotaUsageReports
}

type fstream struct {
	s      grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]
	cancel context.CancelFunc
	target int
	done   chan struct{}
}

// NewFleet checks cfg; nothing runs until Run.
func NewFleet(cfg FleetConfig) (*Fleet, error) {
	switch {
	case len(cfg.Targets) == 0:
		return nil, errors.New("rlqssim: no targets")
	case len(cfg.Envoys) == 0 || len(cfg.Buckets) == 0 || cfg.Demand == nil:
		return nil, errors.New("rlqssim: a fleet needs Envoys, buckets and a demand")
	case cfg.Domain == "":
		return nil, errors.New("rlqssim: no domain")
	}
	if err := cfg.Behaviors.Validate(); err != nil {
		return nil, err
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 10 * time.Millisecond
	}
	if cfg.DialOptions == nil {
		cfg.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	f := &Fleet{cfg: cfg, index: map[string]int{}, down: make([]atomic.Bool, len(cfg.Targets))}
	for i, b := range cfg.Buckets {
		m := make(map[string]string, len(b))
		for k, v := range b {
			if k == "" || v == "" {
				return nil, fmt.Errorf("rlqssim: bucket %d has an empty key or value", i)
			}
			m[k] = v
		}
		f.ids = append(f.ids, &rlqsv3.BucketId{Bucket: m})
		if _, dup := f.index[bucketKey(m)]; dup {
			return nil, fmt.Errorf("rlqssim: bucket %d is there twice", i)
		}
		f.index[bucketKey(m)] = i
	}
	for i, spec := range cfg.Envoys {
		e := &fenvoy{fleet: f, idx: i, conns: make([]*grpc.ClientConn, len(cfg.Targets)), target: i % len(cfg.Targets)}
		for w := range max(spec.Workers, 1) {
			wk := &fworker{e: e, idx: w, f: NewFilter(spec.Client, cfg.Behaviors), acc: make([]accumulator, len(cfg.Buckets)),
				rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i*64+w)))}
			wk.f.OnLapse = func(bucket int, at time.Time) { f.lapse(wk, bucket, at) }
			e.workers = append(e.workers, wk)
		}
		f.envoys = append(f.envoys, e)
	}
	return f, nil
}

// Start is when Run started: second 0 of the records is the unix second
// holding it.
func (f *Fleet) Start() time.Time { return time.Unix(0, f.startNs.Load()) }

// Run plays the fleet for d (or until ctx ends), then ends every stream
// and connection.
func (f *Fleet) Run(ctx context.Context, d time.Duration) error {
	f.start = time.Now()
	f.startNs.Store(f.start.UnixNano())
	secs := int(time.Unix(f.start.Add(d).Unix()+1, 0).Sub(time.Unix(f.start.Unix(), 0)) / time.Second)
	f.mu.Lock()
	for range f.cfg.Buckets {
		a, dd, u := make([][]uint64, len(f.envoys)), make([][]uint64, len(f.envoys)), make([][]uint64, len(f.envoys))
		for e := range a {
			a[e], dd[e], u[e] = make([]uint64, secs), make([]uint64, secs), make([]uint64, secs)
		}
		f.admitted, f.denied, f.unassigned = append(f.admitted, a), append(f.denied, dd), append(f.unassigned, u)
	}
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	for _, e := range f.envoys {
		for _, w := range e.workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.run(ctx)
			}()
		}
	}
	wg.Wait()
	for _, e := range f.envoys {
		for _, w := range e.workers {
			w.mu.Lock()
			st := w.stream
			w.stream = nil
			w.mu.Unlock()
			if st != nil {
				st.cancel()
				<-st.done
			}
		}
		e.mu.Lock()
		for j, c := range e.conns {
			if c != nil {
				c.Close()
				e.conns[j] = nil
			}
		}
		e.mu.Unlock()
	}
	return nil
}

func (w *fworker) run(ctx context.Context) {
	f := w.e.fleet
	t := time.NewTicker(f.cfg.Tick)
	defer t.Stop()
	last := f.start
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		w.mu.Lock()
		if !w.timer.IsZero() && !now.Before(w.timer) {
			w.timer = w.timer.Add(w.f.ReportPeriod())
			if w.timer.Before(now) {
				w.timer = now.Add(w.f.ReportPeriod())
			}
			if w.f.client == PerWorker && w.stream == nil {
				// Its timer never opens a stream (vsim.go's loop).
				w.e.fleet.count(func(s *VStats) { s.Dropped++ })
			} else {
				w.report(ctx, w.f.Report(now))
			}
		}
		for b := range f.cfg.Buckets {
			rate := f.cfg.Demand(w.e.idx, b, now.Sub(f.start)) / float64(len(w.e.workers))
			for _, at := range w.arrivals(b, rate, last, now) {
				ok, sub := w.f.Request(b, at)
				f.record(b, w.e.idx, at, ok, w.f.Unassigned(b))
				if sub != nil {
					w.subscribe(ctx, sub, at)
				}
			}
		}
		out := w.outgoing
		w.outgoing = nil
		w.mu.Unlock()
		for _, o := range out {
			if err := o.st.s.Send(o.m); err != nil {
				f.cfg.Logf("envoy %d/%d: send: %v", w.e.idx, w.idx, err)
				continue
			}
			f.count(func(s *VStats) { s.Reports++ })
		}
		last = now
	}
}

func (w *fworker) arrivals(b int, rate float64, from, to time.Time) []time.Time {
	step := to.Sub(from)
	if rate <= 0 || step <= 0 {
		return nil
	}
	var n int
	if w.e.fleet.cfg.Arrivals == Poisson {
		n = poisson(w.rng, rate*step.Seconds())
	} else {
		n = w.acc[b].add(rate, step)
	}
	out := make([]time.Time, n)
	for i := range out {
		if w.e.fleet.cfg.Arrivals == Poisson {
			out[i] = from.Add(time.Duration(w.rng.Int64N(int64(step))))
		} else {
			out[i] = from.Add(step * time.Duration(i) / time.Duration(n))
		}
	}
	if w.e.fleet.cfg.Arrivals == Poisson {
		sortTimes(out) // even arrivals are made in order
	}
	return out
}

func (f *Fleet) record(b, e int, at time.Time, ok, unassigned bool) {
	s := int(at.Unix() - f.start.Unix())
	f.mu.Lock()
	defer f.mu.Unlock()
	if s < 0 || s >= len(f.admitted[b][e]) {
		return
	}
	switch {
	case ok && unassigned:
		f.unassigned[b][e][s]++
	case ok:
		f.admitted[b][e][s]++
	default:
		f.denied[b][e][s]++
	}
}

// subscribe is as in the simulation (vsim.subscribe). Called with mu held.
func (w *fworker) subscribe(ctx context.Context, usages []Usage, now time.Time) {
	f := w.e.fleet
	f.count(func(s *VStats) { s.Subscriptions++ })
	if w.timer.IsZero() {
		w.timer = now.Add(w.f.ReportPeriod())
	}
	if w.f.client != PerWorker {
		if !w.triedOpen {
			w.triedOpen = true
			w.open(ctx)
		}
		if w.stream == nil {
			f.count(func(s *VStats) { s.Dropped++ })
			return
		}
		w.send(usages)
		return
	}
	w.report(ctx, usages)
}

// report sends a report, opening a stream when there is none (a report
// that cannot be sent is dropped). Called with mu held.
func (w *fworker) report(ctx context.Context, usages []Usage) {
	if w.stream == nil && !w.open(ctx) {
		w.e.fleet.count(func(s *VStats) { s.Dropped++ })
		return
	}
	w.send(usages)
}

func (w *fworker) send(usages []Usage) {
	f := w.e.fleet
	m := &rlqsv3.RateLimitQuotaUsageReports{Domain: f.cfg.Domain,
		BucketQuotaUsages: make([]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, len(usages))}
	for i, u := range usages {
		m.BucketQuotaUsages[i] = &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: f.ids[u.Bucket],
			TimeElapsed: durationpb.New(u.Elapsed), NumRequestsAllowed: u.Allowed, NumRequestsDenied: u.Denied}
	}
	w.outgoing = append(w.outgoing, outgoing{st: w.stream, m: m})
}

// open opens a stream to the next target that is not down. Called with
// mu held; the stream's receiver applies what comes.
func (w *fworker) open(ctx context.Context) bool {
	e := w.e
	f := e.fleet
	n := len(f.cfg.Targets)
	for range n {
		e.mu.Lock()
		j := e.target % n
		e.target++
		if f.down[j].Load() {
			e.mu.Unlock()
			continue
		}
		conn := e.conns[j]
		if conn == nil {
			c, err := grpc.NewClient(f.cfg.Targets[j], f.cfg.DialOptions...)
			if err != nil {
				e.mu.Unlock()
				continue
			}
			e.conns[j], conn = c, c
		}
		e.mu.Unlock()
		sctx, cancel := context.WithCancel(ctx)
		s, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(sctx)
		if err != nil {
			cancel()
			f.cfg.Logf("envoy %d/%d: open to %s: %v", e.idx, w.idx, f.cfg.Targets[j], err)
			continue
		}
		st := &fstream{s: s, cancel: cancel, target: j, done: make(chan struct{})}
		w.stream, w.opened = st, time.Now()
		f.count(func(s *VStats) { s.Streams++ })
		go w.receive(st)
		return true
	}
	return false
}

// receive applies st's responses until it ends, then forgets it.
func (w *fworker) receive(st *fstream) {
	defer close(st.done)
	f := w.e.fleet
	for {
		resp, err := st.s.Recv()
		if err != nil {
			w.mu.Lock()
			if w.stream == st {
				w.stream = nil
			}
			w.mu.Unlock()
			st.cancel()
			return
		}
		acts := make([]Action, 0, len(resp.GetBucketAction()))
		for _, a := range resp.GetBucketAction() {
			act := Action{Bucket: -1}
			if i, ok := f.index[bucketKey(a.GetBucketId().GetBucket())]; ok {
				act.Bucket = i
			}
			switch x := a.GetBucketAction().(type) {
			case *rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_:
				act.Abandon = true
			case *rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_:
				r, err := fromProto(x.QuotaAssignmentAction.GetRateLimitStrategy())
				if err != nil {
					f.count(func(s *VStats) { s.Ignored++ })
					continue
				}
				act.Strategy, act.FillNanos = r.Strategy, r.fillNanos
				act.TTL = time.Duration(x.QuotaAssignmentAction.GetAssignmentTimeToLive().GetSeconds()) * time.Second
			default:
				continue
			}
			acts = append(acts, act)
		}
		w.mu.Lock()
		ign := w.f.Apply(acts, time.Now())
		w.mu.Unlock()
		f.count(func(s *VStats) { s.Actions += len(acts); s.Ignored += ign })
	}
}

func (f *Fleet) count(fn func(*VStats)) {
	f.mu.Lock()
	fn(&f.stats)
	f.mu.Unlock()
}

// lapse records an assignment that ended with nothing after it. Called
// with the worker's mu held.
func (f *Fleet) lapse(w *fworker, bucket int, at time.Time) {
	st := w.stream
	healthy := st != nil && !f.down[st.target].Load() && at.Sub(w.opened) > w.f.ReportPeriod()+time.Second
	f.mu.Lock()
	defer f.mu.Unlock()
	if healthy {
		f.lapses++
		if len(f.lapseLog) < 20 {
			f.lapseLog = append(f.lapseLog, fmt.Sprintf("%s: envoy %d/%d bucket %d on target %d", at.Format("15:04:05.000"), w.e.idx, w.idx, bucket, st.target))
		}
	}
}

// Unanswered lists the buckets an Envoy tracks that have had no
// assignment since it created them ("envoy E/W bucket B"): a fleet whose
// admissions before a first answer are set apart (Unassigned) must also
// see every bucket answered, or a bucket never answered would hide there.
func (f *Fleet) Unanswered() []string {
	var out []string
	for _, e := range f.envoys {
		for _, w := range e.workers {
			w.mu.Lock()
			for b := range f.cfg.Buckets {
				if w.f.Unassigned(b) {
					out = append(out, fmt.Sprintf("envoy %d/%d bucket %d", e.idx, w.idx, b))
				}
			}
			w.mu.Unlock()
		}
	}
	return out
}

// Cut ends Envoy i's streams (all Envoys for -1), as a network failure
// would: it keeps its buckets, and reopens at its next report timer (the
// per-worker client: at its next new bucket only).
func (f *Fleet) Cut(i int) { f.each(i, false) }

// Restart drops everything Envoy i holds (all for -1) and ends its
// streams, as a new process has nothing.
func (f *Fleet) Restart(i int) { f.each(i, true) }

func (f *Fleet) each(i int, reset bool) {
	for j, e := range f.envoys {
		if i >= 0 && i != j {
			continue
		}
		for _, w := range e.workers {
			w.mu.Lock()
			st := w.stream
			w.stream = nil
			if reset {
				w.f.Reset()
				w.timer, w.triedOpen = time.Time{}, false
			}
			w.mu.Unlock()
			if st != nil {
				st.cancel()
			}
		}
	}
}

// SetTargetDown takes target j out of the rotation (or puts it back), as
// Envoy's cluster stops choosing an endpoint found unhealthy.
func (f *Fleet) SetTargetDown(j int, down bool) { f.down[j].Store(down) }

// Admitted is, per Envoy and second of the run, what bucket b admitted
// under what the server sent (assignments, and the fallbacks of expired
// ones). What it admitted before its first assignment, under the Envoy's
// own no_assignment_behavior, is in Unassigned instead: how long that
// lasts is the first round trip, which a starved machine stretches, and
// no server decides it.
func (f *Fleet) Admitted(b int) [][]uint64 { return f.copyOf(f.admitted, b) }

// Unassigned is, per Envoy and second of the run, what bucket b admitted
// before its first assignment (since the Envoy created it, restarts
// included): no_assignment_behavior's doing, ALLOW_ALL by default.
func (f *Fleet) Unassigned(b int) [][]uint64 { return f.copyOf(f.unassigned, b) }

func (f *Fleet) copyOf(counts [][][]uint64, b int) [][]uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([][]uint64, len(counts[b]))
	for e, row := range counts[b] {
		out[e] = append([]uint64(nil), row...)
	}
	return out
}

// Lapses counts assignments that ended unrenewed on a healthy stream.
func (f *Fleet) Lapses() (int, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lapses, append([]string(nil), f.lapseLog...)
}

// Stats are what the fleet did.
func (f *Fleet) Stats() VStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}
