package rlqssim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Config is a fleet of simulated Envoys, all with one filter config.
type Config struct {
	// Targets are the RLQS servers' gRPC addresses (host:port). Envoy i
	// opens its first stream to Targets[i % len], and each later one to the
	// next target, round robin.
	Targets []string
	// Domain is the filter's domain, sent in every report.
	Domain string
	// Envoys is the fleet's size.
	Envoys int
	// Buckets are the BucketIds requests are matched into; Demand and the
	// accessors name them by index.
	Buckets []map[string]string
	// Interval is the buckets' reporting_interval (more than 100 ms, as
	// Envoy validates).
	Interval time.Duration
	// Demand is the request rate per Envoy and bucket over time.
	Demand Demand
	// NoAssignment is no_assignment_behavior (the zero value: ALLOW_ALL,
	// the filter's default).
	NoAssignment Strategy
	// Expired is expired_assignment_behavior; nil: none configured.
	Expired *ExpiredBehavior
	// Tick is how often requests arrive (default 10 ms).
	Tick time.Duration
	// DialOptions for every connection (default: plaintext).
	DialOptions []grpc.DialOption
	// MaxReceived bounds the actions kept per Envoy for Received (default
	// 10,000; the oldest go first).
	MaxReceived int
	// Logf, when set, is told about streams opened and ended.
	Logf func(format string, args ...any)
}

func (c *Config) withDefaults() {
	if c.Tick == 0 {
		c.Tick = 10 * time.Millisecond
	}
	if c.DialOptions == nil {
		c.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	if c.MaxReceived == 0 {
		c.MaxReceived = 10000
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// Validate names the first thing wrong in c.
func (c *Config) Validate() error {
	switch {
	case len(c.Targets) == 0:
		return errors.New("rlqssim: no targets")
	case c.Domain == "":
		return errors.New("rlqssim: no domain")
	case c.Envoys < 1:
		return fmt.Errorf("rlqssim: %d Envoys, want at least one", c.Envoys)
	case len(c.Buckets) == 0:
		return errors.New("rlqssim: no buckets")
	case c.Interval <= 100*time.Millisecond:
		return fmt.Errorf("rlqssim: reporting interval %v, Envoy wants more than 100ms", c.Interval)
	case c.Demand == nil:
		return errors.New("rlqssim: no demand")
	case c.Tick < 0 || c.Tick > c.Interval:
		return fmt.Errorf("rlqssim: tick %v must be positive and at most the interval", c.Tick)
	case c.MaxReceived < 0:
		return errors.New("rlqssim: negative MaxReceived")
	}
	seen := map[string]int{}
	for i, b := range c.Buckets {
		if len(b) == 0 {
			return fmt.Errorf("rlqssim: bucket %d is empty", i)
		}
		for k, v := range b {
			if k == "" || v == "" {
				return fmt.Errorf("rlqssim: bucket %d has an empty key or value (%q: %q)", i, k, v)
			}
		}
		if j, dup := seen[bucketKey(b)]; dup {
			return fmt.Errorf("rlqssim: buckets %d and %d are the same BucketId", j, i)
		}
		seen[bucketKey(b)] = i
	}
	if err := c.NoAssignment.Validate(); err != nil {
		return fmt.Errorf("rlqssim: no-assignment behaviour: %w", err)
	}
	if err := c.Expired.Validate(); err != nil {
		return fmt.Errorf("rlqssim: %w", err)
	}
	return nil
}

// Stats counts what the fleet did.
type Stats struct {
	StreamsOpened int64 // streams opened
	OpenFailures  int64 // opens that failed (the report is dropped)
	StreamErrors  int64 // streams that ended by an error (not a Cut or Restart)
	Cuts          int64
	Restarts      int64
	Messages      int64 // usage report messages sent
	Subscriptions int64 // of which first reports of a bucket
	BucketReports int64 // bucket usages in those messages
	Responses     int64 // RateLimitQuotaResponse messages received
	Assignments   int64 // quota assignments applied
	Abandons      int64 // abandon actions applied
	Ignored       int64 // actions the filter ignored
}

type counters struct {
	opened, openFailures, streamErrors, cuts, restarts atomic.Int64
	messages, subscriptions, bucketReports             atomic.Int64
	responses, assignments, abandons, ignored          atomic.Int64
}

// Sim is a fleet of simulated Envoys. Create it with New, run it once with
// Run; the fault methods and the accessors may be called from any
// goroutine, during and after the run.
type Sim struct {
	cfg    Config
	fb     *fleetBuckets
	envoys []*envoy
	down   []atomic.Bool // per target, taken out of rotation
	ran    atomic.Bool
	c      counters

	mu    sync.Mutex
	start time.Time
	first int64 // unix second of start
	end   time.Time
}

// New checks cfg and builds the fleet; nothing runs until Run.
func New(cfg Config) (*Sim, error) {
	cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	fb := &fleetBuckets{domain: cfg.Domain, index: map[string]int{},
		bh: behaviours{noAssignment: cfg.NoAssignment, expired: cfg.Expired}}
	for i, b := range cfg.Buckets {
		m := make(map[string]string, len(b))
		for k, v := range b {
			m[k] = v
		}
		fb.ids = append(fb.ids, &rlqsv3.BucketId{Bucket: m})
		fb.index[bucketKey(m)] = i
	}
	s := &Sim{cfg: cfg, fb: fb, down: make([]atomic.Bool, len(cfg.Targets))}
	for i := range cfg.Envoys {
		s.envoys = append(s.envoys, newEnvoy(s, i))
	}
	return s, nil
}

// Run plays the fleet for d (or until ctx ends) on the wall clock, then
// closes every stream and connection and returns. It runs once.
func (s *Sim) Run(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("rlqssim: run duration %v, want positive", d)
	}
	if !s.ran.CompareAndSwap(false, true) {
		return errors.New("rlqssim: Run called twice")
	}
	start := time.Now()
	s.mu.Lock()
	s.start, s.first, s.end = start, start.Unix(), start.Add(d)
	s.mu.Unlock()
	ctx, cancel := context.WithDeadline(ctx, start.Add(d))
	defer cancel()
	var wg sync.WaitGroup
	for _, e := range s.envoys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.run(ctx, start)
		}()
	}
	wg.Wait()
	s.mu.Lock()
	if now := time.Now(); now.Before(s.end) {
		s.end = now
	}
	s.mu.Unlock()
	return nil
}

func (s *Sim) envoy(i int) (*envoy, error) {
	if i < 0 || i >= len(s.envoys) {
		return nil, fmt.Errorf("rlqssim: no Envoy %d (fleet of %d)", i, len(s.envoys))
	}
	return s.envoys[i], nil
}

// Cut closes Envoy i's stream, as a network failure would; it keeps its
// buckets and reopens at its next report, to the next target.
func (s *Sim) Cut(i int) error {
	e, err := s.envoy(i)
	if err != nil {
		return err
	}
	e.cut(false)
	s.c.cuts.Add(1)
	return nil
}

// Restart drops all of Envoy i's state, as a restarted process has none:
// its stream closes, its buckets are gone, and the next request into each
// subscribes again.
func (s *Sim) Restart(i int) error {
	e, err := s.envoy(i)
	if err != nil {
		return err
	}
	e.cut(true)
	s.c.restarts.Add(1)
	return nil
}

// SetTargetDown takes target j out of the rotation streams are opened in
// (or puts it back), as Envoy's cluster stops choosing an endpoint found
// unhealthy. Streams already open to it are left to fail by themselves
// when the server goes. With every target down, the rotation uses all.
func (s *Sim) SetTargetDown(j int, down bool) error {
	if j < 0 || j >= len(s.down) {
		return fmt.Errorf("rlqssim: no target %d (%d targets)", j, len(s.down))
	}
	s.down[j].Store(down)
	return nil
}

// Stats returns the fleet's counts so far.
func (s *Sim) Stats() Stats {
	c := &s.c
	return Stats{StreamsOpened: c.opened.Load(), OpenFailures: c.openFailures.Load(), StreamErrors: c.streamErrors.Load(),
		Cuts: c.cuts.Load(), Restarts: c.restarts.Load(), Messages: c.messages.Load(), Subscriptions: c.subscriptions.Load(),
		BucketReports: c.bucketReports.Load(), Responses: c.responses.Load(), Assignments: c.assignments.Load(),
		Abandons: c.abandons.Load(), Ignored: c.ignored.Load()}
}

// Start is when Run started (zero before).
func (s *Sim) Start() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.start
}
