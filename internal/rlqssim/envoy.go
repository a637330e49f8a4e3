package rlqssim

import (
	"context"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
)

type quotaStream = grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]

// openStream is one stream of an Envoy and the cancel that ends it.
type openStream struct {
	s      quotaStream
	ctx    context.Context
	cancel context.CancelFunc
	target int
	closed bool // ended on purpose (Cut, Restart)
}

// counts are one wall-clock second's requests of one Envoy and bucket.
type counts struct{ allowed, denied uint32 }

// envoy is one simulated Envoy: its filter, its stream and what it
// admitted. run's goroutine owns the stream's sends and the receivers it
// starts; mu guards the rest.
type envoy struct {
	sim *Sim
	idx int

	mu         sync.Mutex
	f          *filter
	acc        []accumulator
	perSecond  [][]counts // [bucket][unix second − sim.first]
	total      []counts64
	received   []Received
	stream     *openStream
	nextTarget int
	conns      []*grpc.ClientConn // per target, made at first use

	recv sync.WaitGroup // the stream receivers
}

type counts64 struct{ allowed, denied uint64 }

func newEnvoy(s *Sim, i int) *envoy {
	n := len(s.cfg.Buckets)
	return &envoy{sim: s, idx: i, f: newFilter(s.fb), acc: make([]accumulator, n),
		perSecond: make([][]counts, n), total: make([]counts64, n),
		nextTarget: i % len(s.cfg.Targets), conns: make([]*grpc.ClientConn, len(s.cfg.Targets))}
}

// run plays the Envoy until ctx ends: requests every tick, the periodic
// report every interval (phased by the Envoy's index, as independent
// proxies are not in step), subscription reports as buckets appear.
func (e *envoy) run(ctx context.Context, start time.Time) {
	defer e.shutdown()
	cfg := &e.sim.cfg
	t := time.NewTicker(cfg.Tick)
	defer t.Stop()
	phase := cfg.Interval * time.Duration(e.idx) / time.Duration(cfg.Envoys)
	nextReport := start.Add(phase + cfg.Interval)
	last := start
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		for _, m := range e.tick(now, now.Sub(last), now.Sub(start)) {
			e.sim.c.subscriptions.Add(1)
			e.send(ctx, m)
		}
		last = now
		if now.Before(nextReport) {
			continue
		}
		for !nextReport.After(now) {
			nextReport = nextReport.Add(cfg.Interval)
		}
		e.mu.Lock()
		m := e.f.report(now)
		e.mu.Unlock()
		if m != nil {
			e.send(ctx, m)
		}
	}
}

// tick lets dt's requests in at now and returns the subscription reports
// they caused.
func (e *envoy) tick(now time.Time, dt, sinceStart time.Duration) []*rlqsv3.RateLimitQuotaUsageReports {
	var subs []*rlqsv3.RateLimitQuotaUsageReports
	e.mu.Lock()
	defer e.mu.Unlock()
	for b := range e.acc {
		n := e.acc[b].add(e.sim.cfg.Demand(e.idx, b, sinceStart), dt)
		if n == 0 {
			continue
		}
		for k := range n {
			// The tick's requests arrive one by one over the time it
			// covers, as an Envoy sees them, however late this goroutine
			// ran: a late tick must not turn into a bunch that no bucket
			// of a few tokens could take.
			at := now.Add(-dt + dt*time.Duration(k+1)/time.Duration(n))
			sec := max(int(at.Unix()-e.sim.first), 0)
			row := e.perSecond[b]
			for len(row) <= sec {
				row = append(row, counts{})
			}
			e.perSecond[b] = row
			ok, sub := e.f.request(b, at)
			if sub != nil {
				subs = append(subs, sub)
			}
			if ok {
				row[sec].allowed++
				e.total[b].allowed++
			} else {
				row[sec].denied++
				e.total[b].denied++
			}
		}
	}
	return subs
}

// send sends m on the Envoy's stream, opening one first when there is
// none. A message that cannot be sent is dropped, as Envoy drops it.
func (e *envoy) send(ctx context.Context, m *rlqsv3.RateLimitQuotaUsageReports) {
	st := e.current(ctx)
	if st == nil {
		return
	}
	if err := st.s.Send(m); err != nil {
		// The stream is over; its receiver gets the status and ends it.
		e.detach(st)
		return
	}
	e.sim.c.messages.Add(1)
	e.sim.c.bucketReports.Add(int64(len(m.GetBucketQuotaUsages())))
}

// current returns the open stream, or opens one to the next target in the
// rotation. Only run's goroutine opens streams, so the open itself runs
// without the lock (it may wait for a connection).
func (e *envoy) current(ctx context.Context) *openStream {
	e.mu.Lock()
	if st := e.stream; st != nil {
		e.mu.Unlock()
		return st
	}
	target := e.pickTarget()
	conn, err := e.conn(target)
	e.mu.Unlock()
	if err != nil {
		e.sim.c.openFailures.Add(1)
		e.sim.cfg.Logf("envoy %d: target %s: %v", e.idx, e.sim.cfg.Targets[target], err)
		return nil
	}
	sctx, cancel := context.WithCancel(ctx)
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(sctx)
	if err != nil {
		cancel()
		e.sim.c.openFailures.Add(1)
		e.sim.cfg.Logf("envoy %d: open to %s: %v", e.idx, e.sim.cfg.Targets[target], err)
		return nil
	}
	st := &openStream{s: s, ctx: sctx, cancel: cancel, target: target}
	e.mu.Lock()
	e.stream = st
	e.mu.Unlock()
	e.sim.c.opened.Add(1)
	e.sim.cfg.Logf("envoy %d: stream open to %s", e.idx, e.sim.cfg.Targets[target])
	e.recv.Add(1)
	go func() {
		defer e.recv.Done()
		e.receive(st)
	}()
	return st
}

// pickTarget is the next target in the rotation that is not down (any,
// when all are). Called with mu held.
func (e *envoy) pickTarget() int {
	n := len(e.sim.cfg.Targets)
	for range n {
		j := e.nextTarget % n
		e.nextTarget = (j + 1) % n
		if !e.sim.down[j].Load() {
			return j
		}
	}
	j := e.nextTarget
	e.nextTarget = (j + 1) % n
	return j
}

// conn returns the Envoy's connection to target j. Called with mu held;
// grpc.NewClient does not dial.
func (e *envoy) conn(j int) (*grpc.ClientConn, error) {
	if c := e.conns[j]; c != nil {
		return c, nil
	}
	c, err := grpc.NewClient(e.sim.cfg.Targets[j], e.sim.cfg.DialOptions...)
	if err != nil {
		return nil, err
	}
	e.conns[j] = c
	return c, nil
}

// receive applies the stream's responses until it ends.
func (e *envoy) receive(st *openStream) {
	for {
		resp, err := st.s.Recv()
		if err != nil {
			e.ended(st, err)
			return
		}
		now := time.Now()
		e.mu.Lock()
		rs := e.f.apply(resp, now)
		e.keep(rs)
		e.mu.Unlock()
		e.sim.c.responses.Add(1)
		for _, r := range rs {
			switch {
			case r.Ignored != "":
				e.sim.c.ignored.Add(1)
			case r.Abandon:
				e.sim.c.abandons.Add(1)
			default:
				e.sim.c.assignments.Add(1)
			}
		}
	}
}

// keep appends to the bounded log of actions received. Called with mu
// held.
func (e *envoy) keep(rs []Received) {
	e.received = append(e.received, rs...)
	if max := e.sim.cfg.MaxReceived; len(e.received) > max {
		e.received = append(e.received[:0], e.received[len(e.received)-max/2:]...)
	}
}

// detach forgets st, so the next report opens a new stream.
func (e *envoy) detach(st *openStream) {
	e.mu.Lock()
	if e.stream == st {
		e.stream = nil
	}
	e.mu.Unlock()
}

// ended is st's receiver's last word: the stream is forgotten and its
// context released; an end the Envoy did not cause is counted.
func (e *envoy) ended(st *openStream, err error) {
	e.detach(st)
	e.mu.Lock()
	ours := st.closed || st.ctx.Err() != nil
	e.mu.Unlock()
	st.cancel()
	if !ours {
		e.sim.c.streamErrors.Add(1)
		e.sim.cfg.Logf("envoy %d: stream to %s ended: %v", e.idx, e.sim.cfg.Targets[st.target], err)
	}
}

// cut closes the stream, and with reset drops every bucket too.
func (e *envoy) cut(reset bool) {
	e.mu.Lock()
	st := e.stream
	e.stream = nil
	if st != nil {
		st.closed = true
	}
	if reset {
		e.f.reset()
	}
	e.mu.Unlock()
	if st != nil {
		st.cancel()
	}
}

// shutdown ends the stream, waits for its receivers and closes the
// connections: the end of the run.
func (e *envoy) shutdown() {
	e.cut(false)
	e.recv.Wait()
	e.mu.Lock()
	defer e.mu.Unlock()
	for j, c := range e.conns {
		if c != nil {
			c.Close()
			e.conns[j] = nil
		}
	}
}
