package rlqssim

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/alloc"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/quota"
)

// vclock is the simulated time.
type vclock struct{ now time.Time }

func (c *vclock) Now() time.Time { return c.now }

type vreplica struct {
	eng  *engine.Service
	svc  *quota.Service
	st   *stats.Store
	down bool
}

type vstream struct {
	id      int
	replica int
	st      *quota.Stream
	opened  time.Time
	filter  *vfilter
	ended   bool // the Envoy knows it ended
	closing bool // the server was told
}

type vfilter struct {
	envoy, worker int
	f             *Filter
	stream        *vstream
	timer         time.Time // next report; zero until the first bucket
	triedOpen     bool
	// rng draws the delays of this filter's messages both ways. One per
	// filter, not one for the run: the service pushes to its streams in
	// an order of its own (map iteration, shard scheduling), and a shared
	// generator would hand each run's delays to different Envoys, so the
	// same seed would give a different fleet.
	rng *rand.Rand
}

type venvoy struct {
	spec    EnvoySpec
	filters []*vfilter
	next    int // round robin over workers
	acc     []accumulator
	target  int // round robin over replicas
}

// event is a message in flight, or a stream's end reaching its server.
type event struct {
	at      time.Time
	seq     int
	stream  *vstream
	usages  []Usage  // to the server
	actions []Action // to the Envoy
	toEnvoy bool
	close   bool // the stream's end reaches the server
	// ack: the acknowledgement of what was pushed at pushed reaches the
	// server; replace: the actions held a replacement.
	ack     bool
	replace bool
	pushed  time.Time
}

type events []event

func (q events) Len() int { return len(q) }
func (q events) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	// Ties between streams go by stream, not by push order, for the same
	// reason each filter has its own generator.
	if a, b := q[i].stream.id, q[j].stream.id; a != b {
		return a < b
	}
	return q[i].seq < q[j].seq
}
func (q events) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *events) Push(x any)   { *q = append(*q, x.(event)) }
func (q *events) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type vsim struct {
	cfg      VConfig
	clock    *vclock
	rng      *rand.Rand
	store    *memory.Backend
	board    *memory.Board
	replicas []*vreplica
	envoys   []*venvoy
	q        events
	seq      int
	nextID   int
	index    map[alloc.BucketID]int
	ids      []alloc.BucketID // cfg.Buckets' ids
	run      *VRun
	start    time.Time
}

// Simulate runs cfg to its end.
func Simulate(cfg VConfig) (*VRun, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &vsim{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)), index: map[alloc.BucketID]int{}}
	s.start = time.Unix(1_750_000_000, 0)
	s.clock = &vclock{now: s.start}
	s.store = memory.New(s.clock.Now)
	if !cfg.NoBoard {
		s.board = memory.NewBoard(s.clock.Now)
	}
	for i, b := range cfg.Buckets {
		id := alloc.BucketOf(b)
		s.index[id] = i
		s.ids = append(s.ids, id)
	}
	for i := range cfg.Replicas {
		r, err := s.newReplica(i)
		if err != nil {
			return nil, err
		}
		s.replicas = append(s.replicas, r)
	}
	for _, spec := range cfg.Envoys {
		e := &venvoy{spec: spec, acc: make([]accumulator, len(cfg.Buckets)), target: len(s.envoys) % cfg.Replicas}
		for w := range max(spec.Workers, 1) {
			e.filters = append(e.filters, &vfilter{envoy: len(s.envoys), worker: w, f: NewFilter(spec.Client, cfg.Behaviors),
				rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed<<16|uint64(len(s.envoys))<<8|uint64(w)))})
		}
		s.envoys = append(s.envoys, e)
	}
	secs := int(cfg.Duration / time.Second)
	s.run = &VRun{Start: s.start, Seconds: secs, RLS: make([][]uint64, len(cfg.RLS))}
	for range cfg.Buckets {
		a, d := make([][]uint64, len(s.envoys)), make([][]uint64, len(s.envoys))
		for e := range a {
			a[e], d[e] = make([]uint64, secs), make([]uint64, secs)
		}
		s.run.Admitted, s.run.Denied = append(s.run.Admitted, a), append(s.run.Denied, d)
	}
	for i := range cfg.RLS {
		s.run.RLS[i] = make([]uint64, secs)
	}
	for _, e := range s.envoys {
		for _, vf := range e.filters {
			vf := vf
			vf.f.OnLapse = func(bucket int, at time.Time) { s.lapse(vf, bucket, at) }
		}
	}
	if err := s.loop(); err != nil {
		return nil, err
	}
	for _, r := range s.replicas {
		m := map[string]uint64{}
		r.st.Each(func(v stats.Value) {
			name, ok := strings.CutPrefix(v.Name, "ratelimit.rlqs.")
			switch {
			case !ok:
			case v.Counter != nil:
				m[name] = v.Counter.Value()
			case v.Gauge != nil:
				m[name] = uint64(max(v.Gauge.Value(), 0))
			}
		})
		s.run.Service = append(s.run.Service, m)
		r.svc.Close()
	}
	return s.run, nil
}

func (s *vsim) newReplica(i int) (*vreplica, error) {
	st := stats.NewStore()
	cfg, err := engine.LoadConfig([]engine.ConfigFile{{Name: "rules.yaml", YAML: []byte(s.cfg.Rules)}}, engine.ConfigOptions{Stats: st})
	if err != nil {
		return nil, fmt.Errorf("rlqssim: rules: %w", err)
	}
	eo := engine.DefaultOptions()
	eo.Counter = engine.DirectCounter{Backend: s.store}
	eo.Stats = st
	eo.Clock = s.clock.Now
	eng, err := engine.NewService(eo)
	if err != nil {
		return nil, err
	}
	eng.SetConfig(cfg)
	o := s.cfg.Quota
	o.Clock = s.clock.Now
	o.Shards = 1
	o.Replica = fmt.Sprintf("replica-%d", i)
	if s.cfg.Trace != nil && o.Observe == nil {
		o.Observe = func(_ string, in *alloc.Input, out *alloc.Output) {
			held := map[int64]uint64{}
			for _, h := range in.Held {
				held[(h.Window-s.start.UnixNano())/1e9] = h.N
			}
			s.trace("replica %d plans: held %v short=%v over=%v reserve %d release %d", i, held, out.Short, out.Overcommitted, len(out.Reserve), len(out.Release))
			for k, r := range in.Reporters {
				s.trace("  replica %d r%d live=%v claim=%.1f/%v bursty=%.2f cur=%v segs=%d", i, k, r.Live, r.Claim.Rate, r.Claim.Known, r.Bursty, fromAlloc(r.Cur), len(r.Segs))
			}
			for _, c := range out.Changes {
				s.trace("  -> replica %d r%d %v replace=%v ttl %v", i, c.R, fromAlloc(c.Strat), c.Replace, c.TTL)
			}
		}
	}
	var board quota.Board
	if s.board != nil {
		board = s.board
	}
	svc, err := quota.NewManual(o, eng, eo.Counter, board, st)
	if err != nil {
		return nil, err
	}
	return &vreplica{eng: eng, svc: svc, st: st}, nil
}

func (s *vsim) trace(format string, args ...any) {
	if s.cfg.Trace != nil {
		s.cfg.Trace("%8.3f "+format, append([]any{s.clock.now.Sub(s.start).Seconds()}, args...)...)
	}
}

func (s *vsim) delay(vf *vfilter) time.Duration {
	d := s.cfg.Delay
	if d <= 0 {
		return 0
	}
	return d/2 + time.Duration(vf.rng.Int64N(int64(d/2)+1))
}

// nextTimer is when vf's report timer fires next, having fired at t.
func (s *vsim) nextTimer(vf *vfilter, t time.Time) time.Time {
	if vf.f.client != PerWorker {
		return vf.timer.Add(vf.f.ReportPeriod())
	}
	return t.Add(vf.f.ReportPeriod() + s.late(vf))
}

// late is how late vf's report timer fires. The global clients truncate
// time_elapsed to whole seconds, so their timer is played exact. The
// per-worker client reports it to the nanosecond from its monotonic clock
// (client_impl.cc, buildReport) and re-arms its timer once it has fired:
// a real one fires a little late every time, so its time_elapsed is never
// a whole number of seconds, which is how the service tells it from the
// newest client (a bucket it may refill on a renewal). Played exact, its
// reports said 1 s to the nanosecond, and the service took these Envoys
// for the newest client (no refill counted) while the filter played the
// per-worker bucket: the scenarios did not test what real per-worker
// Envoys get. So it fires one or two steps late.
func (s *vsim) late(vf *vfilter) time.Duration {
	if vf.f.client != PerWorker {
		return 0
	}
	return s.cfg.Step * time.Duration(1+vf.rng.IntN(2))
}

func (s *vsim) push(e event) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.q, e)
}

// loop runs the fleet step by step.
func (s *vsim) loop() error {
	step := s.cfg.Step
	end := s.start.Add(s.cfg.Duration)
	faults := append([]Fault(nil), s.cfg.Faults...)
	rlsAcc := make([]accumulator, len(s.cfg.RLS))
	for t := s.start; t.Before(end); t = t.Add(step) {
		s.clock.now = t
		for len(s.q) > 0 && !s.q[0].at.After(t) {
			s.deliver(heap.Pop(&s.q).(event))
		}
		for len(faults) > 0 && s.start.Add(faults[0].At).Compare(t) <= 0 {
			s.fault(faults[0])
			faults = faults[1:]
		}
		for _, r := range s.replicas {
			if !r.down {
				if due := r.svc.NextDue(); !due.IsZero() && !due.After(t) {
					r.svc.Advance(t)
				}
			}
		}
		for _, e := range s.envoys {
			for _, vf := range e.filters {
				if !vf.timer.IsZero() && !vf.timer.After(t) {
					vf.timer = s.nextTimer(vf, t)
					if vf.f.client == PerWorker && vf.stream == nil {
						// The per-worker client's timer sends only on an open
						// stream and never opens one (client_impl.cc,
						// sendUsageReport): nothing is built, so its counts
						// wait for the stream a new bucket opens.
						s.run.Stats.Dropped++
						continue
					}
					s.report(vf, vf.f.Report(t))
				}
			}
		}
		sec := int(t.Sub(s.start) / time.Second)
		for ei, e := range s.envoys {
			for b := range s.cfg.Buckets {
				rate := s.cfg.Demand(ei, b, t.Sub(s.start))
				for _, at := range s.arrivals(&e.acc[b], rate, t, step) {
					s.clock.now = at
					vf := e.filters[e.next%len(e.filters)]
					e.next++
					ok, sub := vf.f.Request(b, at)
					if ok {
						s.run.Admitted[b][ei][sec]++
					} else {
						s.run.Denied[b][ei][sec]++
					}
					if sub != nil {
						s.subscribe(vf, sub)
					}
				}
			}
		}
		s.clock.now = t
		for i, l := range s.cfg.RLS {
			r := s.replicas[l.Replica]
			for range rlsAcc[i].add(l.Rate, step) {
				if r.down {
					continue
				}
				resp, err := r.eng.ShouldRateLimit(context.Background(), &engine.Request{Domain: s.cfg.Domain,
					Descriptors: []engine.Descriptor{{Entries: l.Entries}}})
				if err == nil && resp.OverallCode == engine.CodeOK {
					s.run.RLS[i][sec]++
				}
			}
		}
	}
	return nil
}

// subscribe sends a new bucket's first report: the global clients start
// their report timer and stream with their first bucket, and send the
// report only if the stream is open; the per-worker client opens one.
func (s *vsim) subscribe(vf *vfilter, usages []Usage) {
	s.run.Stats.Subscriptions++
	if vf.timer.IsZero() {
		vf.timer = s.clock.now.Add(vf.f.ReportPeriod() + s.late(vf))
	}
	if vf.f.client != PerWorker {
		if !vf.triedOpen {
			vf.triedOpen = true
			s.open(vf)
		}
		if vf.stream == nil {
			s.run.Stats.Dropped++
			return
		}
		s.send(vf, usages)
		return
	}
	s.report(vf, usages)
}

// report sends a report, opening a stream if there is none (a report that
// cannot be sent is dropped: its counts are gone). The per-worker client's
// timer does not come here without a stream (loop).
func (s *vsim) report(vf *vfilter, usages []Usage) {
	if vf.stream == nil && !s.open(vf) {
		s.run.Stats.Dropped++
		return
	}
	s.send(vf, usages)
}

func (s *vsim) send(vf *vfilter, usages []Usage) {
	s.run.Stats.Reports++
	s.push(event{at: s.clock.now.Add(s.delay(vf)), stream: vf.stream, usages: usages})
}

// open opens a stream to the next replica that is up.
func (s *vsim) open(vf *vfilter) bool {
	e := s.envoys[vf.envoy]
	for range s.replicas {
		j := e.target % len(s.replicas)
		e.target++
		if s.replicas[j].down {
			continue
		}
		s.nextID++
		vs := &vstream{id: s.nextID, replica: j, opened: s.clock.now, filter: vf}
		vs.st = s.replicas[j].svc.Open(&vsink{s: s, vs: vs})
		vf.stream = vs
		s.run.Stats.Streams++
		s.trace("envoy %d/%d: stream %d open to replica %d", vf.envoy, vf.worker, vs.id, j)
		return true
	}
	return false
}

// vsink is a stream's Sink: what the service pushes reaches the Envoy a
// delay later.
type vsink struct {
	s  *vsim
	vs *vstream
}

func (k *vsink) Push(acts []quota.Action) {
	s := k.s
	out := make([]Action, len(acts))
	replace := false
	for i, a := range acts {
		replace = replace || a.Replace
		idx, ok := s.index[a.Bucket]
		if !ok {
			idx = -1
		}
		out[i] = Action{Bucket: idx, Abandon: a.Abandon, Strategy: fromAlloc(a.Strategy),
			FillNanos: int32(a.Strategy.FillInterval % time.Second), TTL: a.TTL}
	}
	s.push(event{at: s.clock.now.Add(s.delay(k.vs.filter)), stream: k.vs, actions: out, toEnvoy: true, replace: replace, pushed: s.clock.now})
}

func fromAlloc(a alloc.Strategy) Strategy {
	switch a.Kind {
	case alloc.TokenBucket:
		return Strategy{Kind: TokenBucket, MaxTokens: a.MaxTokens, TokensPerFill: a.TokensPerFill, FillInterval: a.FillInterval.Truncate(time.Second)}
	case alloc.DenyAll:
		return Strategy{Kind: DenyAll}
	}
	return Strategy{Kind: AllowAll}
}

// deliver takes an event that reached its end.
func (s *vsim) deliver(ev event) {
	vs := ev.stream
	switch {
	case ev.ack:
		if !vs.closing && !s.replicas[vs.replica].down {
			vs.st.Acked(ev.pushed, s.clock.now)
		}
	case ev.close:
		if !vs.closing {
			vs.closing = true
			vs.st.Close()
		}
	case ev.toEnvoy:
		if vs.ended || vs.filter.stream != vs {
			return // the stream ended on the way
		}
		s.run.Stats.Actions += len(ev.actions)
		for _, a := range ev.actions {
			s.trace("envoy %d/%d gets bucket %d abandon=%v %v ttl %v", vs.filter.envoy, vs.filter.worker, a.Bucket, a.Abandon, a.Strategy, a.TTL)
		}
		s.run.Stats.Ignored += vs.filter.f.Apply(ev.actions, s.clock.now)
		if s.cfg.Acks && ev.replace {
			s.push(event{at: s.clock.now.Add(s.delay(vs.filter)), stream: vs, ack: true, pushed: ev.pushed})
		}
	default:
		if vs.closing || s.replicas[vs.replica].down {
			return
		}
		us := make([]quota.Usage, len(ev.usages))
		for i, u := range ev.usages {
			us[i] = quota.Usage{Bucket: s.ids[u.Bucket], Elapsed: u.Elapsed, Allowed: u.Allowed, Denied: u.Denied}
		}
		for _, u := range ev.usages {
			s.trace("stream %d (envoy %d) reports bucket %d: %d allowed %d denied over %v", vs.id, vs.filter.envoy, u.Bucket, u.Allowed, u.Denied, u.Elapsed)
		}
		if err := vs.st.Report(s.clock.now, s.cfg.Domain, us); err != nil {
			s.trace("stream %d: report refused: %v", vs.id, err)
		}
	}
}

// endStream ends vs for its Envoy now, and for its server a delay later.
func (s *vsim) endStream(vs *vstream, serverNow bool) {
	if vs == nil || vs.ended {
		return
	}
	vs.ended = true
	if vs.filter.stream == vs {
		vs.filter.stream = nil
	}
	if serverNow {
		vs.closing = true
		vs.st.Close()
		return
	}
	s.push(event{at: s.clock.now.Add(s.delay(vs.filter)), stream: vs, close: true})
}

func (s *vsim) fault(f Fault) {
	s.trace("fault %+v", f)
	each := func(fn func(*venvoy)) {
		for i, e := range s.envoys {
			if f.Envoy < 0 || f.Envoy == i {
				fn(e)
			}
		}
	}
	switch f.Kind {
	case Cut:
		each(func(e *venvoy) {
			for _, vf := range e.filters {
				s.endStream(vf.stream, false)
			}
		})
	case Restart:
		each(func(e *venvoy) {
			for _, vf := range e.filters {
				s.endStream(vf.stream, false)
				vf.f.Reset()
				vf.timer, vf.triedOpen = time.Time{}, false
			}
		})
	case StopReplica:
		r := s.replicas[f.Replica]
		for _, e := range s.envoys {
			for _, vf := range e.filters {
				if vs := vf.stream; vs != nil && vs.replica == f.Replica {
					s.endStream(vs, true)
				}
			}
		}
		r.svc.Drain(context.Background())
		r.down = true
		r.svc.Close()
	case Reload:
		for _, r := range s.replicas {
			cfg, err := engine.LoadConfig([]engine.ConfigFile{{Name: "rules.yaml", YAML: []byte(s.cfg.Rules)}},
				engine.ConfigOptions{Stats: r.st})
			if err == nil {
				r.eng.SetConfig(cfg)
			}
		}
	}
}

// lapse records an assignment that ended with nothing after it.
func (s *vsim) lapse(vf *vfilter, bucket int, at time.Time) {
	s.run.AllLapses++
	vs := vf.stream
	healthy := vs != nil && !vs.ended && !s.replicas[vs.replica].down && at.Sub(vs.opened) > vf.f.ReportPeriod()+time.Second
	if healthy {
		s.run.Lapses++
		if len(s.run.LapseLog) < 20 {
			s.run.LapseLog = append(s.run.LapseLog, fmt.Sprintf("%.3fs: envoy %d/%d bucket %d on stream %d (replica %d, open since %.3fs)",
				at.Sub(s.start).Seconds(), vf.envoy, vf.worker, bucket, vs.id, vs.replica, vs.opened.Sub(s.start).Seconds()))
		}
	}
}
