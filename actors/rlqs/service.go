package rlqs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/engine"
	alloc "github.com/sluicehq/sluice/engine/rlqs"
	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/internal/tick"
)

// Rules is what the service needs of the engine: the rule of a bucket's
// descriptor, and the config it came from (a new one is a reload).
type Rules interface {
	QuotaRule(domain string, entries []engine.Entry) (engine.QuotaRule, bool, error)
	Config() *engine.Config
}

// Action is one BucketAction for a stream: an assignment of Strategy for
// TTL, or, when Abandon, abandon_action.
type Action struct {
	// Key names the bucket (engine/rlqs.Key): a later action for the same
	// Key supersedes an earlier one not yet written.
	Key      string
	Bucket   map[string]string
	Abandon  bool
	Strategy alloc.Strategy
	TTL      time.Duration
}

// Sink takes a stream's actions; Push must not block (the stream's owner
// queues them and writes them in order).
type Sink interface{ Push([]Action) }

// Usage is one bucket's part of a usage report.
type Usage struct {
	Bucket  map[string]string
	Elapsed time.Duration
	Allowed uint64
	Denied  uint64
}

// ErrClosed is returned by Stream.Report once the service has stopped.
var ErrClosed = errors.New("rlqs: the quota service has stopped")

// Service serves the Rate Limit Quota Service's streams of one replica.
type Service struct {
	o       Options
	rules   Rules
	counter engine.Counter
	st      metrics

	mu      sync.Mutex
	hubs    map[string]*hub
	streams map[*Stream]struct{}
	cfg     *engine.Config
	closed  bool
	nextID  uint64

	stop chan struct{}
	done chan struct{}
}

// New starts a service that counts on counter (the one RLS decisions
// count through, so that both share the limits). Close stops it.
func New(o Options, rules Rules, counter engine.Counter, st *stats.Store) (*Service, error) {
	s, err := newService(o, rules, counter, st)
	if err != nil {
		return nil, err
	}
	go s.loop()
	return s, nil
}

// newService is a service whose loop is not started.
func newService(o Options, rules Rules, counter engine.Counter, st *stats.Store) (*Service, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if st == nil {
		st = stats.NewStore()
	}
	return &Service{o: o, rules: rules, counter: counter, st: newMetrics(st),
		hubs: make(map[string]*hub), streams: make(map[*Stream]struct{}),
		stop: make(chan struct{}), done: make(chan struct{})}, nil
}

// Close stops serving. Reservations stay counted: the Envoys keep their
// assignments until they expire, and what they admit meanwhile was paid
// for when they were sent.
func (s *Service) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	<-s.done
}

// Stream is one StreamRateLimitQuotas call: its reports come in through
// Report, its actions go out through its Sink.
type Stream struct {
	s      *Service
	id     uint64
	sink   Sink
	domain string
	hubs   map[*hub]struct{}
	last   time.Time
	every  time.Duration
	closed bool
}

// Open registers a new stream whose actions go to sink.
func (s *Service) Open(sink Sink) *Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	st := &Stream{s: s, id: s.nextID, sink: sink, hubs: make(map[*hub]struct{})}
	s.streams[st] = struct{}{}
	s.st.streams.Set(int64(len(s.streams)))
	return st
}

// Report takes one RateLimitQuotaUsageReports message received at now.
// domain must be set in the first and may not change. The error names what
// is wrong with the message; nothing of a bad message is taken.
func (st *Stream) Report(now time.Time, domain string, usages []Usage) error {
	if err := checkUsages(usages); err != nil {
		return err
	}
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrClosed
	case st.closed:
		return errors.New("rlqs: report on a closed stream")
	case st.domain == "" && domain == "":
		return errors.New("rlqs: the first usage report of a stream must name its domain")
	case st.domain != "" && domain != "" && domain != st.domain:
		return fmt.Errorf("rlqs: usage report for domain %q on a stream of domain %q", domain, st.domain)
	}
	if st.domain == "" {
		st.domain = domain
	}
	if !st.last.IsZero() {
		// The reporting interval: the longest recent gap, since a new
		// bucket's first report arrives between two periodic ones.
		st.every = max(now.Sub(st.last), st.every*3/4)
	}
	st.last = now
	var refused []Action
	for i := range usages {
		u := &usages[i]
		key := st.domain + "\x00" + alloc.Key(u.Bucket)
		h := s.hubs[key]
		if h == nil {
			if len(st.hubs) >= s.o.MaxBuckets {
				refused = append(refused, Action{Key: key, Bucket: u.Bucket, Abandon: true})
				s.st.refused.Inc()
				continue
			}
			h = s.newHub(key, st.domain, u.Bucket)
		}
		h.report(st, u, now, s)
	}
	s.st.reports.Add(uint64(len(usages)))
	if len(refused) > 0 {
		st.sink.Push(refused)
	}
	return nil
}

func checkUsages(usages []Usage) error {
	for i, u := range usages {
		if len(u.Bucket) == 0 {
			return fmt.Errorf("rlqs: bucket_quota_usages[%d]: bucket_id has no entries", i)
		}
		for k, v := range u.Bucket {
			if k == "" || v == "" {
				return fmt.Errorf("rlqs: bucket_quota_usages[%d]: bucket_id entry %q: %q has an empty key or value", i, k, v)
			}
		}
		if u.Elapsed < 0 {
			return fmt.Errorf("rlqs: bucket_quota_usages[%d]: negative time_elapsed %v", i, u.Elapsed)
		}
	}
	return nil
}

// Close ends the stream: its Envoy may still enforce what it was sent, so
// its reporters stay counted, as ghosts, until their assignments expire.
func (st *Stream) Close() {
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.closed {
		return
	}
	st.closed = true
	for h := range st.hubs {
		if r := h.reporters[st]; r != nil {
			r.ghost = true
			h.dirty = true
		}
	}
	delete(s.streams, st)
	s.st.streams.Set(int64(len(s.streams)))
}

// ttl is the assignment TTL for st's Envoy.
func (st *Stream) ttl(o *alloc.Options) time.Duration { return o.TTL(st.every) }

// loop serves the hubs every Tick until Close.
func (s *Service) loop() {
	defer close(s.done)
	tick.Every(s.stop, s.o.Tick, func() { s.tick(time.Now()) })
}

// call applies ops within the call timeout; Close waits for it.
func (s *Service) call(ops []engine.CounterOp) error {
	if len(ops) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.o.CallTimeout)
	defer cancel()
	return s.counter.Apply(ctx, ops, nil)
}
