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

// run starts sluice on Redis under load, kills Redis and brings it back
// (timeline), then judges the calls of each phase.
func run(o options) ([]string, error) {
	sc, err := harness.NewScenario("redis-kill", o.bin, "redis")
	if err != nil {
		return nil, err
	}
	defer sc.Close()
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

	tl, err := killAndRestart(o, sc)
	stopLoad()
	if lerr := <-loadDone; err == nil {
		err = lerr
	}
	if err != nil {
		return nil, err
	}
	tl.end = time.Now()

	p := phases{tl: tl, calls: rec.Calls()}
	broken := p.checkBound(bound)
	broken = append(broken, p.checkDown()...)
	broken = append(broken, p.checkRecovery(o)...)
	for code, msg := range rec.FirstErrors() {
		log.Printf("first %s: %s", code, msg)
	}
	if len(broken) > 0 {
		log.Printf("sluice log tail:\n%s", s.LogTail(15))
	}
	broken = harness.StopClean(broken, s, 15*time.Second)
	return broken, nil
}

// timeline is when each step of the fault happened.
type timeline struct {
	t0                 time.Time // load running, Redis up
	killStart, killed  time.Time
	restartStart, back time.Time
	end                time.Time // load stopped
}

// killAndRestart lets the load run, kills Redis, keeps it down, restarts
// it and lets the load run again, noting when each step happened.
func killAndRestart(o options, sc *harness.Scenario) (timeline, error) {
	redis, tb := sc.Redis, sc.TB
	var tl timeline
	tl.t0 = time.Now()
	time.Sleep(o.before)
	tl.killStart = time.Now()
	redis.Kill()
	tl.killed = time.Now()
	log.Printf("redis killed at +%s", tl.killed.Sub(tl.t0).Round(time.Millisecond))
	time.Sleep(o.down)
	tl.restartStart = time.Now()
	redis.Restart(tb)
	if err := tb.Err(); err != nil {
		return tl, err
	}
	tl.back = time.Now()
	log.Printf("redis back at +%s (restart took %s)", tl.back.Sub(tl.t0).Round(time.Millisecond), tl.back.Sub(tl.restartStart).Round(time.Millisecond))
	time.Sleep(o.after)
	return tl, nil
}

// phases judges the recorded calls against the timeline.
type phases struct {
	tl    timeline
	calls []harness.Call
}

func endOf(c harness.Call) time.Time { return c.Start.Add(c.Latency) }

// since is t as an offset from the start of the timeline, for the log.
func (p phases) since(t time.Time) time.Duration { return t.Sub(p.tl.t0).Round(time.Millisecond) }

// report logs the calls pick selects as one phase from..to and returns them.
func (p phases) report(name string, from, to time.Time, pick func(c harness.Call) bool) []harness.Call {
	var in []harness.Call
	for _, c := range p.calls {
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
	log.Printf("%-9s +%s..+%s: %6d calls %s; %s", name, p.since(from), p.since(to),
		len(in), harness.CodeCounts(byCode), harness.Summarize(lat))
	return in
}

// checkBound: every call is answered within the bound, Redis up or down.
func (p phases) checkBound(bound time.Duration) []string {
	var late []harness.Call
	for _, c := range p.calls {
		if c.Latency > bound {
			late = append(late, c)
		}
	}
	if len(late) == 0 {
		return nil
	}
	sort.Slice(late, func(i, j int) bool { return late[i].Latency > late[j].Latency })
	return []string{fmt.Sprintf("%d of %d calls took longer than the bound %s (slowest %s, %s, started at +%s)",
		len(late), len(p.calls), bound, late[0].Latency.Round(time.Millisecond), late[0].Code, p.since(late[0].Start))}
}

// checkDown: every call is OK before the kill and Unavailable while Redis
// is down; the calls across the kill and the restart are only logged.
func (p phases) checkDown() []string {
	tl := p.tl
	var broken []string
	healthy := p.report("before", tl.t0, tl.killStart, func(c harness.Call) bool { return endOf(c).Before(tl.killStart) })
	for _, c := range healthy {
		if c.Code != codes.OK {
			broken = append(broken, fmt.Sprintf("before the kill a call failed with %s (sluice was not healthy to begin with)", c.Code))
			break
		}
	}
	p.report("straddle", tl.killStart, tl.killed, func(c harness.Call) bool {
		return !endOf(c).Before(tl.killStart) && c.Start.Before(tl.killed)
	})
	down := p.report("down", tl.killed, tl.restartStart, func(c harness.Call) bool {
		return !c.Start.Before(tl.killed) && endOf(c).Before(tl.restartStart)
	})
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
	p.report("restart", tl.restartStart, tl.back, func(c harness.Call) bool {
		return !endOf(c).Before(tl.restartStart) && c.Start.Before(tl.back) && !c.Start.Before(tl.killed)
	})
	return broken
}

// checkRecovery: an OK answer comes within -recover of Redis being back,
// and from then on every call is OK.
func (p phases) checkRecovery(o options) []string {
	tl := p.tl
	after := p.report("after", tl.back, tl.end, func(c harness.Call) bool { return !c.Start.Before(tl.back) })
	firstOK := -1
	for i, c := range after {
		if c.Code == codes.OK {
			firstOK = i
			break
		}
	}
	if firstOK < 0 {
		return []string{fmt.Sprintf("no OK answer in the %s after Redis came back", o.after)}
	}
	var broken []string
	rec := endOf(after[firstOK]).Sub(tl.back)
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
		broken = append(broken, fmt.Sprintf("after the first OK, calls still failed: %s (last started +%s)", harness.CodeCounts(failed), p.since(lastFail)))
	}
	return broken
}
