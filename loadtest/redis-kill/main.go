package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/sluicehq/sluice/loadtest/internal/harness"
)

type options struct {
	bin            string
	callers, keys  int
	backendTimeout time.Duration
	margin         time.Duration
	before, down   time.Duration
	after          time.Duration
	recover        time.Duration
}

func main() {
	harness.LogAs("redis-kill")
	var o options
	flag.StringVar(&o.bin, "sluice", "bin/sluice", "sluice binary")
	flag.IntVar(&o.callers, "callers", 16, "concurrent callers")
	flag.IntVar(&o.keys, "keys", 1000, "distinct descriptor values")
	flag.DurationVar(&o.backendTimeout, "backend-timeout", time.Second, "SLUICE_BACKEND_TIMEOUT given to sluice")
	flag.DurationVar(&o.margin, "margin", time.Second, "allowed on top of the backend timeout (scheduling on a busy machine)")
	flag.DurationVar(&o.before, "before", 5*time.Second, "load before the kill")
	flag.DurationVar(&o.down, "down", 10*time.Second, "how long Redis stays down")
	flag.DurationVar(&o.after, "after", 10*time.Second, "load after Redis is back")
	flag.DurationVar(&o.recover, "recover", 5*time.Second, "longest wait for the first OK after Redis is back")
	flag.Parse()
	if err := o.validate(); err != nil {
		log.Fatal(err)
	}
	harness.Verdict(run(o))
}

func (o options) validate() error {
	switch {
	case o.callers < 1 || o.keys < 1:
		return fmt.Errorf("-callers and -keys must be at least 1")
	case o.backendTimeout <= 0 || o.margin < 0:
		return fmt.Errorf("-backend-timeout must be positive and -margin not negative")
	case o.before <= 0 || o.down <= 0 || o.after <= 0 || o.recover <= 0:
		return fmt.Errorf("-before, -down, -after and -recover must be positive")
	case o.recover >= o.after:
		return fmt.Errorf("-recover (%s) must be shorter than -after (%s)", o.recover, o.after)
	}
	return nil
}

func run(o options) ([]string, error) {
	sc, err := harness.NewScenario("redis-kill", o.bin, "redis")
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	redis, tb := sc.Redis, sc.TB
	sc.Sluice.BackendTimeout = o.backendTimeout
	ctx := context.Background()
	s, client, err := sc.StartRLS(ctx, "faults.yaml", harness.FaultRules)
	if err != nil {
		return nil, err
	}

	bound := o.backendTimeout + o.margin
	// The client waits well past the bound, so a late answer is measured as
	// late instead of being cut off and mistaken for a timeout.
	callTimeout := bound + 5*time.Second
	call := func(ctx context.Context, caller int) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		req := harness.Request("faults", harness.Descriptor("k", fmt.Sprint((caller*7919+int(time.Now().UnixNano()))%o.keys)))
		return harness.Decide(ctx, client, req, grpc.WaitForReady(false))
	}
	total := o.before + o.down + o.after
	lc := harness.LoadConfig{Callers: o.callers, Duration: total + 2*callTimeout, MaxCallsPerCaller: 5_000_000}
	rec := harness.NewRecorder(o.callers)
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan error, 1)
	go func() { loadDone <- harness.RunLoad(loadCtx, lc, call, rec.Record) }()

	t0 := time.Now()
	time.Sleep(o.before)
	killStart := time.Now()
	redis.Kill()
	killed := time.Now()
	log.Printf("redis killed at +%s", killed.Sub(t0).Round(time.Millisecond))
	time.Sleep(o.down)
	restartStart := time.Now()
	redis.Restart(tb)
	if err := tb.Err(); err != nil {
		stopLoad()
		<-loadDone
		return nil, err
	}
	back := time.Now()
	log.Printf("redis back at +%s (restart took %s)", back.Sub(t0).Round(time.Millisecond), back.Sub(restartStart).Round(time.Millisecond))
	time.Sleep(o.after)
	stopLoad()
	if err := <-loadDone; err != nil {
		return nil, err
	}
	end := time.Now()

	calls := rec.Calls()
	var broken []string
	report := func(name string, from, to time.Time, pick func(c harness.Call) bool) []harness.Call {
		var in []harness.Call
		for _, c := range calls {
			if pick(c) {
				in = append(in, c)
			}
		}
		byCode := map[codes.Code]int{}
		lat := make([]time.Duration, 0, len(in))
		for _, c := range in {
			byCode[c.Code]++
			lat = append(lat, c.Latency)
		}
		log.Printf("%-9s +%s..+%s: %6d calls %s; %s", name, from.Sub(t0).Round(time.Millisecond), to.Sub(t0).Round(time.Millisecond),
			len(in), harness.CodeCounts(byCode), harness.Summarize(lat))
		return in
	}
	endOf := func(c harness.Call) time.Time { return c.Start.Add(c.Latency) }

	// 1. Every call answered within the bound.
	var late []harness.Call
	for _, c := range calls {
		if c.Latency > bound {
			late = append(late, c)
		}
	}
	if len(late) > 0 {
		sort.Slice(late, func(i, j int) bool { return late[i].Latency > late[j].Latency })
		broken = append(broken, fmt.Sprintf("%d of %d calls took longer than the bound %s (slowest %s, %s, started at +%s)",
			len(late), len(calls), bound, late[0].Latency.Round(time.Millisecond), late[0].Code, late[0].Start.Sub(t0).Round(time.Millisecond)))
	}

	healthy := report("before", t0, killStart, func(c harness.Call) bool { return endOf(c).Before(killStart) })
	for _, c := range healthy {
		if c.Code != codes.OK {
			broken = append(broken, fmt.Sprintf("before the kill a call failed with %s (sluice was not healthy to begin with)", c.Code))
			break
		}
	}
	report("straddle", killStart, killed, func(c harness.Call) bool { return !endOf(c).Before(killStart) && c.Start.Before(killed) })

	// 2. Unavailable while down.
	down := report("down", killed, restartStart, func(c harness.Call) bool { return !c.Start.Before(killed) && endOf(c).Before(restartStart) })
	if len(down) == 0 {
		broken = append(broken, "no call was made while Redis was down")
	}
	wrong := map[codes.Code]int{}
	for _, c := range down {
		if c.Code != codes.Unavailable {
			wrong[c.Code]++
		}
	}
	if len(wrong) > 0 {
		broken = append(broken, fmt.Sprintf("while Redis was down some answers were not Unavailable: %s", harness.CodeCounts(wrong)))
	}
	report("restart", restartStart, back, func(c harness.Call) bool {
		return !endOf(c).Before(restartStart) && c.Start.Before(back) && !c.Start.Before(killed)
	})

	// 3. Recovery.
	after := report("after", back, end, func(c harness.Call) bool { return !c.Start.Before(back) })
	firstOK := -1
	for i, c := range after {
		if c.Code == codes.OK {
			firstOK = i
			break
		}
	}
	if firstOK < 0 {
		broken = append(broken, fmt.Sprintf("no OK answer in the %s after Redis came back", o.after))
	} else {
		rec := endOf(after[firstOK]).Sub(back)
		log.Printf("recovery: first OK answer %s after Redis was back", rec.Round(time.Millisecond))
		if rec > o.recover {
			broken = append(broken, fmt.Sprintf("first OK came %s after Redis was back (bound %s)", rec.Round(time.Millisecond), o.recover))
		}
		failed := map[codes.Code]int{}
		var lastFail time.Time
		for _, c := range after[firstOK:] {
			if c.Code != codes.OK {
				failed[c.Code]++
				lastFail = c.Start
			}
		}
		if len(failed) > 0 {
			broken = append(broken, fmt.Sprintf("after the first OK, calls still failed: %s (last started +%s)", harness.CodeCounts(failed), lastFail.Sub(t0).Round(time.Millisecond)))
		}
	}
	for code, msg := range rec.FirstErrors() {
		log.Printf("first %s: %s", code, msg)
	}
	if len(broken) > 0 {
		log.Printf("sluice log tail:\n%s", s.LogTail(15))
	}
	broken = harness.StopClean(broken, s, 15*time.Second)
	return broken, nil
}
