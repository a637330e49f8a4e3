package rlqssim

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// peer is a throwaway RLQS server for the stream tests: it keeps every
// message of every stream and answers each report with one fixed
// assignment per bucket reported. It allocates nothing; it is a test
// peer, not a model of sluice.
type peer struct {
	t      *testing.T
	srv    *grpc.Server
	addr   string
	answer Strategy
	ttl    time.Duration

	mu      sync.Mutex
	streams [][]*rlqsv3.RateLimitQuotaUsageReports
}

func startPeer(t *testing.T, answer Strategy, ttl time.Duration) *peer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &peer{t: t, srv: grpc.NewServer(), addr: ln.Addr().String(), answer: answer, ttl: ttl}
	rlqsv3.RegisterRateLimitQuotaServiceServer(p.srv, p)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.srv.Serve(ln)
	}()
	t.Cleanup(func() {
		p.srv.Stop()
		<-done
	})
	return p
}

func (p *peer) StreamRateLimitQuotas(s grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
	p.mu.Lock()
	n := len(p.streams)
	p.streams = append(p.streams, nil)
	p.mu.Unlock()
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p.mu.Lock()
		p.streams[n] = append(p.streams[n], proto.Clone(m).(*rlqsv3.RateLimitQuotaUsageReports))
		p.mu.Unlock()
		resp := &rlqsv3.RateLimitQuotaResponse{}
		for _, u := range m.GetBucketQuotaUsages() {
			a := assignment("", p.answer, 0, p.ttl).BucketAction[0]
			a.BucketId = u.GetBucketId()
			resp.BucketAction = append(resp.BucketAction, a)
		}
		if err := s.Send(resp); err != nil {
			return err
		}
	}
}

// snapshot is every stream's messages so far.
func (p *peer) snapshot() [][]*rlqsv3.RateLimitQuotaUsageReports {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([][]*rlqsv3.RateLimitQuotaUsageReports, len(p.streams))
	for i, s := range p.streams {
		out[i] = append([]*rlqsv3.RateLimitQuotaUsageReports(nil), s...)
	}
	return out
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runSim runs s in the background; the returned stop ends it and waits.
func runSim(t *testing.T, s *Sim) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, time.Minute) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

var oneBucket = []map[string]string{{"user": "ann"}}

// An assigned token bucket bounds what an Envoy admits in any whole second
// after it arrived: at most max_tokens + the refill of one second.
func TestEnforcesTheAssignment(t *testing.T) {
	quota := tb(10, 50, time.Second)
	p := startPeer(t, quota, 10*time.Second)
	s, err := New(Config{Targets: []string{p.addr}, Domain: "d", Envoys: 2, Buckets: oneBucket,
		Interval: 500 * ms, Demand: Spread(400, 2), NoAssignment: Strategy{Kind: DenyAll}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runSim(t, s)
	var assigned time.Time
	waitFor(t, "both Envoys to enforce the assignment", func() bool {
		return s.Bucket(0, 0).Enforcing == quota && s.Bucket(1, 0).Enforcing == quota
	})
	assigned = time.Now()
	waitFor(t, "three whole seconds after the assignment", func() bool {
		return time.Since(assigned.Truncate(time.Second)) > 4*time.Second
	})
	stop()
	for e := range 2 {
		judged := 0
		for _, ps := range s.AdmittedBy(e, 0) {
			if ps.Second <= assigned.Unix() || ps.Second+1 > time.Now().Unix() {
				continue
			}
			judged++
			if ps.Allowed > 10+50 {
				t.Errorf("Envoy %d admitted %d in second %d, more than its token bucket allows (60)", e, ps.Allowed, ps.Second)
			}
			if ps.Denied == 0 {
				t.Errorf("Envoy %d denied nothing in second %d at twice its quota", e, ps.Second)
			}
		}
		if judged == 0 {
			t.Errorf("Envoy %d: no whole second after the assignment recorded", e)
		}
	}
	st := s.Stats()
	if st.StreamsOpened != 2 || st.Subscriptions != 2 || st.Assignments == 0 || st.Messages < 4 {
		t.Errorf("stats %+v: want 2 streams, 2 subscriptions, periodic reports and assignments", st)
	}
}

// A stream that breaks is reopened at the next report to the next target,
// carrying every bucket; a restarted Envoy subscribes from scratch.
func TestReconnectCutRestart(t *testing.T) {
	quota := tb(100, 100, time.Second)
	a, b := startPeer(t, quota, 10*time.Second), startPeer(t, quota, 10*time.Second)
	s, err := New(Config{Targets: []string{a.addr, b.addr}, Domain: "d", Envoys: 1,
		Buckets:  []map[string]string{{"user": "ann"}, {"user": "bob"}},
		Interval: 200 * ms, Demand: Spread(100, 1), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	stop := runSim(t, s)
	defer stop()
	waitFor(t, "a periodic report on target a", func() bool {
		st := a.snapshot()
		return len(st) == 1 && len(st[0]) >= 3
	})
	first := a.snapshot()[0]
	if u := first[0].BucketQuotaUsages; len(u) != 1 || u[0].NumRequestsAllowed+u[0].NumRequestsDenied != 1 || u[0].TimeElapsed.AsDuration() != 0 {
		t.Errorf("the first message %v is not a subscription of one request", first[0])
	}

	a.srv.Stop() // the replica goes away
	waitFor(t, "a stream on target b", func() bool { return len(b.snapshot()) == 1 && len(b.snapshot()[0]) > 0 })
	if m := b.snapshot()[0][0]; len(m.BucketQuotaUsages) != 2 {
		t.Errorf("the reconnect's first message %v does not carry both buckets", m)
	}

	if err := s.SetTargetDown(0, true); err != nil {
		t.Fatal(err)
	}
	if err := s.Cut(0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a second stream on b after the cut", func() bool { return len(b.snapshot()) == 2 && len(b.snapshot()[1]) > 0 })
	if m := b.snapshot()[1][0]; len(m.BucketQuotaUsages) != 2 || m.BucketQuotaUsages[0].NumRequestsAllowed <= 1 {
		t.Errorf("after a cut the first message %v is not the periodic report of both buckets", m)
	}

	if err := s.Restart(0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a third stream on b after the restart", func() bool { return len(b.snapshot()) == 3 && len(b.snapshot()[2]) > 0 })
	if u := b.snapshot()[2][0].BucketQuotaUsages; len(u) != 1 || u[0].NumRequestsAllowed != 1 || u[0].TimeElapsed.AsDuration() != 0 {
		t.Errorf("after a restart the first message %v is not a fresh subscription", u)
	}
	if err := s.Cut(1); err == nil {
		t.Error("Cut of an Envoy that does not exist succeeded")
	}
	st := s.Stats()
	if st.StreamsOpened != 4 || st.StreamErrors != 1 || st.Cuts != 1 || st.Restarts != 1 {
		t.Errorf("stats %+v: want 4 streams opened, 1 ended by the server, 1 cut, 1 restart", st)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Targets: []string{"x:1"}, Domain: "d", Envoys: 1, Buckets: oneBucket, Interval: time.Second, Demand: Spread(1, 1)}
	for name, mut := range map[string]func(*Config){
		"no targets":       func(c *Config) { c.Targets = nil },
		"no domain":        func(c *Config) { c.Domain = "" },
		"no envoys":        func(c *Config) { c.Envoys = 0 },
		"empty bucket":     func(c *Config) { c.Buckets = []map[string]string{{}} },
		"empty value":      func(c *Config) { c.Buckets = []map[string]string{{"k": ""}} },
		"duplicate bucket": func(c *Config) { c.Buckets = []map[string]string{{"k": "v"}, {"k": "v"}} },
		"short interval":   func(c *Config) { c.Interval = 100 * ms },
		"no demand":        func(c *Config) { c.Demand = nil },
		"bad no-assignment": func(c *Config) {
			c.NoAssignment = Strategy{Kind: TokenBucket}
		},
		"negative timeout": func(c *Config) { c.Expired = &ExpiredBehavior{Timeout: -1} },
	} {
		c := ok
		mut(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	s, err := New(ok)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Check(Criteria{Limit: 1}); err == nil {
		t.Error("Check before Run succeeded")
	}
}
