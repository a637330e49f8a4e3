package server_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/rlqssim"
	"github.com/sluicehq/sluice/internal/testenv"
)

// quotaFleet is the fleet: ten Envoys asking 3,000/s of a 1,000/s
// rule (one 2,100, two 300, seven 43), on Envoy's default
// no_assignment_behavior, ALLOW_ALL; with perWorker, half of them the
// per-worker client (reports every second), the others the newest global
// client (5 s report timer).
func quotaFleet(targets []string, perWorker bool) rlqssim.FleetConfig {
	d, err := rlqssim.Skewed(3000, []rlqssim.Group{{Envoys: 1, Share: 70}, {Envoys: 2, Share: 20}, {Envoys: 7, Share: 10}})
	if err != nil {
		panic(err)
	}
	envoys := make([]rlqssim.EnvoySpec, 10)
	for i := range envoys {
		envoys[i] = rlqssim.EnvoySpec{Client: rlqssim.Global}
		if perWorker && i%2 == 1 {
			envoys[i] = rlqssim.EnvoySpec{Client: rlqssim.PerWorker, Workers: 1}
		}
	}
	return rlqssim.FleetConfig{Targets: targets, Domain: "q", Buckets: []map[string]string{{"user": "ann"}}, Envoys: envoys,
		Demand: d, Arrivals: rlqssim.Poisson, Seed: 1, Behaviors: rlqssim.Behaviors{ReportingInterval: time.Second}}
}

// checkNeverOver fails every second in which the fleet (under what the
// service sent) and the RLS callers together admitted more than 1,000,
// every assignment that lapsed on a healthy stream, and every bucket
// never answered. It asserts no rate: how much of the limit is
// used is measured by loadtest/rlqs and bench, and asserted in simulated
// time (internal/rlqssim's TestScenarios), where a busy machine cannot
// change it.
func checkNeverOver(t *testing.T, f *rlqssim.Fleet, rls []uint64) {
	t.Helper()
	admitted := f.Admitted(0)
	var line []string
	for s := range admitted[0] {
		n := uint64(0)
		for e := range admitted {
			n += admitted[e][s]
		}
		r := uint64(0)
		if s < len(rls) {
			r = rls[s]
		}
		line = append(line, fmt.Sprintf("%d+%d", n, r))
		if n+r > 1000 {
			t.Errorf("second %d: Envoys %d + RLS %d = %d admitted under a limit of 1,000", s, n, r, n+r)
		}
	}
	lapses, log := f.Lapses()
	if lapses > 0 {
		t.Errorf("%d assignments lapsed on healthy streams: %v", lapses, log)
	}
	// What the Envoys admitted before their buckets' first answers is
	// their own no_assignment_behavior's (ALLOW_ALL here), for as long as
	// the first round trip takes on this machine: not counted above, but
	// every bucket must have been answered.
	if un := f.Unanswered(); len(un) > 0 {
		t.Errorf("buckets never answered: %v", un)
	}
	var own uint64
	for _, row := range f.Unassigned(0) {
		for _, n := range row {
			own += n
		}
	}
	t.Logf("Envoys+RLS per second: %v; admitted before a first answer: %d; fleet %+v", line, own, f.Stats())
}

// TestQuotaFleetNeverOver: the fleet on one replica, on either gRPC server
// and store, with an Envoy's stream cut and another Envoy restarted, never
// admits more than the limit in a second, and no assignment lapses.
func TestQuotaFleetNeverOver(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 12 s of traffic per server and store")
	}
	for _, server := range quotaServers {
		for _, backend := range []string{"memory", "redis"} {
			t.Run(server+"/"+backend, func(t *testing.T) {
				t.Parallel()
				env := slowMachine(map[string]string{"SLUICE_GRPC_SERVER": server})
				if backend == "redis" {
					r := testenv.StartRedis(t, testenv.RedisOptions{})
					env["BACKEND_TYPE"], env["REDIS_SOCKET_TYPE"], env["REDIS_URL"] = "redis", "tcp", r.Addr
				}
				h := startClock(t, env, map[string]string{"q.yaml": quotaRules}, nil)
				f, err := rlqssim.NewFleet(quotaFleet([]string{h.GRPC}, true))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				go func() {
					sleepCtx(ctx, 4*time.Second)
					f.Cut(0)
					sleepCtx(ctx, 2*time.Second)
					f.Restart(3)
				}()
				if err := f.Run(ctx, 12*time.Second); err != nil {
					t.Fatal(err)
				}
				checkNeverOver(t, f, nil)
			})
		}
	}
}

// TestQuotaFleetReplicas: the fleet on two replicas sharing Redis (and
// their claims), with RLS callers at 300/s through the second, a stream
// cut, and the first replica stopped (SIGTERM's path: its streams end
// UNAVAILABLE, it gives back what its Envoys no longer need, and they
// reopen their streams to the second), never admits more than the limit
// in a second, RLS callers included.
func TestQuotaFleetReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 14 s of traffic per server")
	}
	for _, server := range quotaServers {
		t.Run(server, func(t *testing.T) {
			t.Parallel()
			r := testenv.StartRedis(t, testenv.RedisOptions{})
			env := slowMachine(map[string]string{"BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": r.Addr, "SLUICE_GRPC_SERVER": server})
			h1 := startClock(t, env, map[string]string{"q.yaml": quotaRules}, nil)
			h2 := startClock(t, env, map[string]string{"q.yaml": quotaRules}, nil)
			// Global clients only: a per-worker Envoy whose replica stops never
			// opens a stream to the other (its timer does not open streams),
			// and falls to ALLOW_ALL at its TTL, its own fallback
			// (internal/rlqssim's TestScenarios judges those rows).
			f, err := rlqssim.NewFleet(quotaFleet([]string{h1.GRPC, h2.GRPC}, false))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var mu sync.Mutex
			rls := make([]uint64, 20)
			runCtx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				rlqssim.RunRLS(runCtx, h2.GRPC, "q", []engine.Entry{{Key: "user", Value: "ann"}}, 300, func(at time.Time) {
					mu.Lock()
					defer mu.Unlock()
					if s := int(at.Unix() - f.Start().Unix()); s >= 0 && s < len(rls) {
						rls[s]++
					}
				})
			}()
			go func() {
				defer wg.Done()
				sleepCtx(runCtx, 4*time.Second)
				f.Cut(2)
				sleepCtx(runCtx, 3*time.Second)
				f.SetTargetDown(0, true)
				h1.Stop(t)
			}()
			err = f.Run(ctx, 14*time.Second)
			stop()
			wg.Wait()
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			checkNeverOver(t, f, rls)
		})
	}
}

// slowMachine adds to env the bounds the quota service's promises rest
// on, made generous for a starved test machine: a message applied by the
// simulated Envoy within 2 s of its delivery (not 250 ms), and TTLs with
// 3 s of margin. The logic checked is the same (a missing renewal or an
// uncounted bucket still fails); only the machine's speed stops mattering.
func slowMachine(env map[string]string) map[string]string {
	env["SLUICE_RLQS_DELIVERY"], env["SLUICE_RLQS_MARGIN"] = "2s", "3s"
	return env
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
