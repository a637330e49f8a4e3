package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/sluicehq/sluice/internal/rlqssim"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/loadtest/internal/harness"
)

// flood runs a row of issue 43's bucket flood against one sluice (rows.go:
// new buckets on many streams at once, a stream that never reads, many
// concurrent streams, very large reports), a probe Envoy
// subscribing a bucket every 250 ms and an RLS caller throughout (in a
// process of their own unless -probe-process=false: probes.go). It
// prints one summary line; broken lists what failed (an unanswered probe,
// a failed RLS decision, an unanswered bucket), and worst is the probe's
// longest wait.
func flood(ctx context.Context, o options, row floodRow) (worst time.Duration, broken []string, err error) {
	hs, err := harness.NewScenario("rlqs-flood", o.bin, o.backend)
	if err != nil {
		return 0, nil, err
	}
	defer hs.Close()
	cfg := hs.Sluice
	cfg.Env = append(cfg.Env, "SLUICE_GRPC_SERVER="+o.server)
	if err := o.pin.lookTaskset(); err != nil {
		return 0, nil, err
	}
	if o.pin.on() {
		if cfg.Bin, err = o.pin.wrap(hs.Work, cfg.Bin); err != nil {
			return 0, nil, err
		}
		if err := o.pin.pinSelf(); err != nil {
			return 0, nil, err
		}
	}
	// One bucket per user, as the docs' x-user example buckets requests.
	if err := testenv.WriteRules(cfg, "rules.yaml", rlqssim.ScenarioRules); err != nil {
		return 0, nil, err
	}
	s, err := testenv.StartSluice(ctx, cfg)
	if err != nil {
		return 0, nil, err
	}
	defer s.Stop(10 * time.Second)
	rssBefore, _ := testenv.RSS(s.PID())
	stopProbe, err := startProbe(ctx, s.GRPC, o.probeProcess, o.pin)
	if err != nil {
		return 0, nil, err
	}
	defer stopProbe()
	start := time.Now()
	profCtx, stopProf := context.WithCancel(ctx)
	profDone := make(chan error, 1)
	peaks := make(chan int64, 1)
	go func() { profDone <- profileFlood(profCtx, o, s.Debug) }()
	go func() { peaks <- peakRSS(profCtx, o, s.PID(), s.Debug) }()
	did, broken, err := row.run(ctx, s.GRPC)
	floodTook := time.Since(start)
	stopProf()
	if perr := <-profDone; perr != nil {
		fmt.Fprintf(os.Stderr, "profile: %v\n", perr)
	}
	peak := <-peaks
	if err != nil {
		return 0, nil, err
	}
	// A report period more of probes after the flood.
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
	}
	pr, err := stopProbe()
	if err != nil {
		return 0, nil, err
	}
	broken = append(broken, failed("probe", pr.ProbeErr)...)
	broken = append(broken, failed("RLS decisions", pr.RLSErr)...)
	saveProbes(o, pr, start)
	lat := withWaiting(slices.Clone(pr.Took), pr.Waiting, o.server)
	if len(lat) == 0 {
		return 0, append(broken, "no probe answered"), nil
	}
	slices.Sort(lat)
	fmt.Printf("flood %s %s%s: %s in %v; probe (%d, %s) p50 %v p99 %v max %v; %d RLS decisions, %d failed; RSS %d → peak %d MB\n",
		row.name, o.server, o.pin, did, floodTook.Round(time.Millisecond), len(lat), probeWhere(o.probeProcess), testenv.Percentile(lat, 0.5), testenv.Percentile(lat, 0.99),
		lat[len(lat)-1], pr.RLSCalls, boolInt(pr.RLSErr != ""), rssBefore>>20, peak>>20)
	return lat[len(lat)-1], broken, nil
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
func failed(what, err string) []string {
	if err == "" {
		return nil
	}
	return []string{what + ": " + err}
}

func probeWhere(own bool) string {
	if own {
		return "own process"
	}
	return "in the flooding process"
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// floodStreams subscribes buckets new buckets on each of streams streams
// (a connection each) at once and waits for them; it returns what failed.
func floodStreams(ctx context.Context, target string, streams, buckets int) ([]string, error) {
	var broken []string
	var mu sync.Mutex
	var fw sync.WaitGroup
	for i := range streams {
		c, err := dial(target)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		fw.Add(1)
		go func() {
			defer fw.Done()
			n, err := rlqssim.Flood(ctx, rlqsv3.NewRateLimitQuotaServiceClient(c), i, buckets, nil)
			if err != nil || n != buckets {
				mu.Lock()
				broken = append(broken, fmt.Sprintf("flood stream %d: %d of %d buckets answered (%v)", i, n, buckets, err))
				mu.Unlock()
			}
		}()
	}
	fw.Wait()
	return broken, nil
}

// peakRSS is the largest RSS of the process pid, read every 250 ms until
// ctx ends (read only as each flood stream ended, it missed the peaks
// between them). With -profile, a heap profile is saved at each new peak
// a tenth above the last one saved (<profile>-<server>-heap.pprof), so
// that what the peak is made of can be read off.
func peakRSS(ctx context.Context, o options, pid int, debug string) int64 {
	var peak, saved int64
	for {
		if rss, err := testenv.RSS(pid); err == nil && rss > peak {
			peak = rss
			if o.profile != "" && peak > saved+saved/10 {
				saved = peak
				path := o.profile + "-" + o.server + "-heap.pprof"
				if err := testenv.SaveURL(ctx, "http://"+debug+"/debug/pprof/heap", path); err != nil && ctx.Err() == nil {
					fmt.Fprintf(os.Stderr, "profile: %v\n", err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return peak
		case <-time.After(250 * time.Millisecond):
		}
	}
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
	url, path := "http://"+debug+"/debug/pprof/profile?seconds=5", prefix+".pprof"
	if o.trace {
		url, path = "http://"+debug+"/debug/pprof/trace?seconds=5", prefix+".trace"
	}
	go func() { cpu <- testenv.SaveURL(context.WithoutCancel(ctx), url, path) }()
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
