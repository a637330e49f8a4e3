package transport_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/rlqssim"
	"github.com/sluicehq/sluice/internal/testenv"
)

// quotaServers are the gRPC servers the RLQS tests run on.
var quotaServers = []string{"native", "grpc-go"}

// TestQuotaFleetSkewed is the first criterion, end to end: ten
// simulated Envoys report one bucket limited to 1000/s, with a demand of
// 3000/s skewed 70/20/10; the heaviest goes idle half-way. Once two
// reporting intervals have passed (after the start, and after the
// heaviest stops), every second the fleet admits 95–100 % of the limit (or
// of the demand, when that is less), and every Envoy that asks for its
// max-min fair share gets at least 0.9 of it.
func TestQuotaFleetSkewed(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 16 s of traffic")
	}
	// On the default server: the allocation is the same on both, and the
	// other tests here run the stream on grpc-go's too.
	for _, server := range quotaServers[:1] {
		t.Run(server, func(t *testing.T) {
			h := startClock(t, map[string]string{"SLUICE_GRPC_SERVER": server}, map[string]string{"q.yaml": quotaRules}, nil)
			d, err := rlqssim.Skewed(3000, []rlqssim.Group{{Envoys: 1, Share: 70}, {Envoys: 2, Share: 20}, {Envoys: 7, Share: 10}})
			if err != nil {
				t.Fatal(err)
			}
			sim, err := rlqssim.New(rlqssim.Config{Targets: []string{h.grpc}, Domain: "q", Envoys: 10,
				Buckets: []map[string]string{{"user": "ann"}}, Interval: time.Second,
				Demand: rlqssim.IdleAt(d, 0, 8*time.Second), NoAssignment: rlqssim.Strategy{Kind: rlqssim.DenyAll}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := sim.Run(ctx, 16*time.Second); err != nil {
				t.Fatal(err)
			}
			v, err := sim.Check(rlqssim.Criteria{Limit: 1000, Settle: 2 * time.Second, MinFleet: 0.95, MinShare: 0.9})
			if err != nil {
				t.Fatal(err)
			}
			var fleet []uint64
			for _, p := range sim.Admitted(0) {
				fleet = append(fleet, p.Allowed)
			}
			t.Logf("fleet per second %v; judged %d seconds, %d…%d", fleet, v.Judged, v.FleetMin, v.FleetMax)
			for _, e := range []int{0, 1, 3} {
				for _, r := range sim.Received(e) {
					t.Logf("envoy %d: %v %+v ttl %v", e, r.At.Sub(sim.Start()).Round(time.Millisecond), r.Strategy, r.TTL)
				}
			}
			if !v.OK() || v.Judged < 8 {
				t.Errorf("criteria failed (%d seconds judged): %v", v.Judged, v.Failures)
			}
		})
	}
}

// TestQuotaFleetWithRLSNeverOver: Envoys on two replicas sharing Redis and
// an RLS caller on the same rule through the second never admit more than
// the limit together in any second, while a stream is cut, an Envoy
// restarts and the first replica is stopped (SIGTERM's path: its streams end UNAVAILABLE and the
// Envoys reconnect to the second).
func TestQuotaFleetWithRLSNeverOver(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 10 s of traffic")
	}
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	env := map[string]string{"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": r.Addr, "SLUICE_GRPC_SERVER": quotaServers[0]}
	h1 := startClock(t, env, map[string]string{"q.yaml": quotaRules}, nil)
	h2 := startClock(t, env, map[string]string{"q.yaml": quotaRules}, nil)
	sim, err := rlqssim.New(rlqssim.Config{Targets: []string{h1.grpc, h2.grpc}, Domain: "q", Envoys: 6,
		Buckets: []map[string]string{{"user": "ann"}}, Interval: time.Second,
		Demand: rlqssim.Spread(3000, 6), NoAssignment: rlqssim.Strategy{Kind: rlqssim.DenyAll}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	rls := map[int64]uint64{}
	runCtx, stopRLS := context.WithCancel(ctx)
	wg.Add(2)
	go func() { // 300 RLS calls a second through replica 2
		defer wg.Done()
		client := rlsv3.NewRateLimitServiceClient(h2.grpcConn(t))
		req := &rlsv3.RateLimitRequest{Domain: "q", Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "ann"}}}}}
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for runCtx.Err() == nil {
			select {
			case <-runCtx.Done():
				return
			case <-tk.C:
			}
			for i := 0; i < 3; i++ {
				at := time.Now()
				resp, err := client.ShouldRateLimit(runCtx, req)
				if err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
					mu.Lock()
					rls[at.Unix()]++
					mu.Unlock()
				}
			}
		}
	}()
	go func() { // faults
		defer wg.Done()
		sleepCtx(runCtx, 3*time.Second)
		if err := sim.Cut(1); err != nil {
			t.Error(err)
		}
		if err := sim.Restart(3); err != nil { // an Envoy restarts: its buckets start empty
			t.Error(err)
		}
		sleepCtx(runCtx, 2*time.Second)
		if err := sim.SetTargetDown(0, true); err != nil {
			t.Error(err)
		}
		h1.stop(t)
	}()
	err = sim.Run(ctx, 10*time.Second)
	stopRLS()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	var line []string
	for _, p := range sim.Admitted(0) {
		n := p.Allowed + rls[p.Second]
		line = append(line, fmt.Sprintf("%d+%d", p.Allowed, rls[p.Second]))
		if n > 1000 {
			t.Errorf("second %d: Envoys %d + RLS %d = %d admitted under a limit of 1000", p.Second, p.Allowed, rls[p.Second], n)
		}
	}
	t.Logf("Envoys+RLS per second: %v; simulator %+v", line, sim.Stats())
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
