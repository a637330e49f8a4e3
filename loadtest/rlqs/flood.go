package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/rlqssim"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/loadtest/internal/harness"
)

// flood runs issue 43's bucket flood against one sluice: streams × buckets
// new buckets at once (each stream its own connection), a probe Envoy
// subscribing a bucket every 250 ms and an RLS caller throughout. It
// prints one summary line; broken lists what failed (an unanswered probe,
// a failed RLS decision, an unanswered bucket).
func flood(ctx context.Context, o options, streams, buckets int) ([]string, error) {
	hs, err := harness.NewScenario("rlqs-flood", o.bin, o.backend)
	if err != nil {
		return nil, err
	}
	defer hs.Close()
	cfg := hs.Sluice
	cfg.Env = append(cfg.Env, "SLUICE_GRPC_SERVER="+o.server)
	// One bucket per user, as the docs' x-user example buckets requests.
	if err := testenv.WriteRules(cfg, "rules.yaml", rlqssim.ScenarioRules); err != nil {
		return nil, err
	}
	s, err := testenv.StartSluice(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer s.Stop(10 * time.Second)
	dial := func() (*grpc.ClientConn, error) {
		return grpc.NewClient(s.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	rssBefore, _ := testenv.RSS(s.PID())
	probeCtx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	var bg sync.WaitGroup
	var lat []time.Duration
	var waiting time.Duration // the probe unanswered when the probing stopped
	var probeErr, rlsErr error
	probes := &probeLog{}
	rlsCalls := 0
	for _, run := range []func(*grpc.ClientConn){
		func(c *grpc.ClientConn) {
			lat, waiting, probeErr = rlqssim.ProbeEach(probeCtx, rlqsv3.NewRateLimitQuotaServiceClient(c), probes.add)
		},
		func(c *grpc.ClientConn) {
			rlsCalls, rlsErr = rlqssim.RLSLoop(probeCtx, rlsv3.NewRateLimitServiceClient(c))
		},
	} {
		c, err := dial()
		if err != nil {
			return nil, err
		}
		defer c.Close()
		bg.Add(1)
		go func() { defer bg.Done(); run(c) }()
	}
	start := time.Now()
	profCtx, stopProf := context.WithCancel(ctx)
	profDone := make(chan error, 1)
	go func() { profDone <- profileFlood(profCtx, o, s.Debug) }()
	broken, peak, err := floodStreams(ctx, dial, s.PID(), streams, buckets)
	floodTook := time.Since(start)
	stopProf()
	if perr := <-profDone; perr != nil {
		fmt.Fprintf(os.Stderr, "profile: %v\n", perr)
	}
	if err != nil {
		return nil, err
	}
	// A report period more of probes after the flood.
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
	}
	stopProbe()
	bg.Wait()
	broken = append(broken, failed("probe", probeErr)...)
	broken = append(broken, failed("RLS decisions", rlsErr)...)
	probes.save(o, start)
	lat = withWaiting(lat, waiting, o.server)
	if len(lat) == 0 {
		return append(broken, "no probe answered"), nil
	}
	slices.Sort(lat)
	fmt.Printf("flood %s: %d streams × %d new buckets answered in %v; probe (%d) p50 %v p99 %v max %v; %d RLS decisions, %d failed; RSS %d → peak %d MB\n",
		o.server, streams, buckets, floodTook.Round(time.Millisecond), len(lat), testenv.Percentile(lat, 0.5), testenv.Percentile(lat, 0.99),
		lat[len(lat)-1], rlsCalls, boolInt(rlsErr != nil), rssBefore>>20, peak>>20)
	return broken, nil
}

// withWaiting counts the probe unanswered when probing stopped with its
// wait so far, a lower bound of its latency, so that a stalled server's
// max is not read low.
func withWaiting(lat []time.Duration, waiting time.Duration, server string) []time.Duration {
	if waiting <= 0 {
		return lat
	}
	fmt.Printf("flood %s: a probe was still unanswered after %v when probing stopped (counted with that wait)\n", server, waiting.Round(time.Millisecond))
	return append(lat, waiting)
}

// failed is what broke, err, as what, or nothing.
func failed(what string, err error) []string {
	if err == nil {
		return nil
	}
	return []string{fmt.Sprintf("%s: %v", what, err)}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// floodStreams subscribes buckets new buckets on each of streams streams
// (a connection each) at once and waits for them; it returns what failed
// and the peak RSS of the process pid seen meanwhile.
func floodStreams(ctx context.Context, dial func() (*grpc.ClientConn, error), pid, streams, buckets int) ([]string, int64, error) {
	var broken []string
	var mu sync.Mutex
	var peak int64
	var fw sync.WaitGroup
	for i := range streams {
		c, err := dial()
		if err != nil {
			return nil, 0, err
		}
		defer c.Close()
		fw.Add(1)
		go func() {
			defer fw.Done()
			n, err := rlqssim.Flood(ctx, rlqsv3.NewRateLimitQuotaServiceClient(c), i, buckets, nil)
			rss, _ := testenv.RSS(pid)
			mu.Lock()
			defer mu.Unlock()
			peak = max(peak, rss)
			if err != nil || n != buckets {
				broken = append(broken, fmt.Sprintf("flood stream %d: %d of %d buckets answered (%v)", i, n, buckets, err))
			}
		}()
	}
	fw.Wait()
	return broken, peak, nil
}

// profileFlood saves, when o.profile is set, the server's CPU profile
// of the flood's first seconds and a goroutine dump every second until
// ctx ends (the flood is over), so that what the probe waits behind can
// be read off.
func profileFlood(ctx context.Context, o options, debug string) error {
	if o.profile == "" {
		return nil
	}
	prefix := o.profile + "-" + o.server
	cpu := make(chan error, 1)
	go func() {
		cpu <- testenv.SaveURL(context.WithoutCancel(ctx), "http://"+debug+"/debug/pprof/profile?seconds=5", prefix+".pprof")
	}()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return <-cpu
		case <-time.After(time.Second):
		}
		if err := testenv.SaveURL(ctx, "http://"+debug+"/debug/pprof/goroutine?debug=1", fmt.Sprintf("%s-goroutines-%d.txt", prefix, i)); err != nil && ctx.Err() == nil {
			return err
		}
	}
}
