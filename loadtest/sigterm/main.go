package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/loadtest/internal/harness"
)

type options struct {
	bin        string
	backend    string
	callers    int
	warmup     time.Duration
	hold       time.Duration
	exitWithin time.Duration
	answerIn   time.Duration
}

func main() {
	harness.LogAs("sigterm")
	var o options
	flag.StringVar(&o.bin, "sluice", "bin/sluice", "sluice binary")
	flag.StringVar(&o.backend, "backend", "redis", "redis or memory (memory implies -hold 0)")
	flag.IntVar(&o.callers, "callers", 32, "concurrent callers")
	flag.DurationVar(&o.warmup, "warmup", 3*time.Second, "load before the signal")
	flag.DurationVar(&o.hold, "hold", 400*time.Millisecond, "Redis write pause that parks the in-flight calls (0: none)")
	flag.DurationVar(&o.exitWithin, "exit-within", 5*time.Second, "longest time from SIGTERM to exit")
	flag.DurationVar(&o.answerIn, "answer-within", 5*time.Second, "longest any call may wait for its answer")
	flag.Parse()
	if o.backend == "memory" {
		o.hold = 0
	}
	switch {
	case o.backend != "redis" && o.backend != "memory":
		log.Fatal("-backend must be redis or memory")
	case o.callers < 1 || o.warmup <= 0 || o.hold < 0 || o.exitWithin <= 0 || o.answerIn <= 0:
		log.Fatal("-callers, -warmup, -exit-within and -answer-within must be positive, -hold not negative")
	case o.hold >= 2*time.Second:
		log.Fatal("-hold must stay below the 2 s backend timeout given to sluice")
	}
	harness.Verdict(run(o))
}

// run starts sluice under load, parks calls in it (a Redis write pause),
// sends SIGTERM, and then judges the exit and the calls' answers.
func run(o options) ([]string, error) {
	sc, err := harness.NewScenario("sigterm", o.bin, o.backend)
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	// Longer than any hold, so a parked call waits rather than fails.
	sc.Sluice.BackendTimeout = 2 * time.Second
	var admin *goredis.Client
	if sc.Redis != nil {
		admin = sc.Redis.Client(sc.TB)
	}
	ctx := context.Background()
	s, client, err := sc.StartRLS(ctx, "faults.yaml", harness.FaultRules)
	if err != nil {
		return nil, err
	}

	call := func(ctx context.Context, caller int) (bool, error) {
		// Far past -answer-within: a slow answer is measured, not cut off.
		ctx, cancel := context.WithTimeout(ctx, o.answerIn+10*time.Second)
		defer cancel()
		return harness.Decide(ctx, client, harness.Request("faults", harness.Descriptor("k", fmt.Sprint(caller))))
	}
	rec := harness.NewRecorder(o.callers)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loadDone := make(chan error, 1)
	lc := harness.LoadConfig{Callers: o.callers, Duration: o.warmup + o.exitWithin + o.answerIn + 30*time.Second, MaxCallsPerCaller: 5_000_000}
	go func() { loadDone <- harness.RunLoad(loadCtx, lc, call, rec.Record) }()

	t0 := time.Now()
	time.Sleep(o.warmup)
	if err := parkCalls(ctx, o, admin); err != nil {
		stopLoad()
		<-loadDone
		return nil, err
	}
	signalled := time.Now()
	if err := s.Signal(syscall.SIGTERM); err != nil {
		stopLoad()
		<-loadDone
		return nil, err
	}
	broken, exited := awaitExit(o, s)
	// Callers keep calling until sluice is gone, so calls after the signal
	// are exercised too; a few more after the exit show connect refusals.
	time.Sleep(100 * time.Millisecond)
	stopLoad()
	if err := <-loadDone; err != nil {
		return nil, err
	}
	if code := s.ExitCode(); code != 0 {
		broken = append(broken, fmt.Sprintf("sluice exited with status %d after SIGTERM", code))
	}
	log.Printf("SIGTERM at +%s; sluice exited %s later with status %d",
		signalled.Sub(t0).Round(time.Millisecond), exited.Sub(signalled).Round(time.Millisecond), s.ExitCode())

	broken = append(broken, checkCalls(o, rec.Calls(), signalled)...)
	if o.hold == 0 {
		log.Print("no hold: calls started just before the signal may not have reached sluice yet; -hold makes the in-flight set exact")
	}
	for code, msg := range rec.FirstErrors() {
		log.Printf("first %s: %s", code, msg)
	}
	if len(broken) > 0 {
		log.Printf("sluice log tail:\n%s", s.LogTail(15))
	}
	return broken, nil
}

// parkCalls pauses Redis writes for -hold and waits until every caller's
// current call has reached sluice and waits there, so that the signal
// finds calls in flight. With -hold 0 it does nothing.
func parkCalls(ctx context.Context, o options, admin *goredis.Client) error {
	if o.hold <= 0 {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := admin.Do(pctx, "CLIENT", "PAUSE", o.hold.Milliseconds(), "WRITE").Err()
	cancel()
	if err != nil {
		return fmt.Errorf("CLIENT PAUSE: %w", err)
	}
	// Let every caller's current call reach sluice and park there.
	time.Sleep(o.hold / 3)
	return nil
}

// awaitExit waits up to -exit-within for sluice to exit after the signal,
// killing it if it does not, and returns when it was gone.
func awaitExit(o options, s *testenv.Sluice) (broken []string, exited time.Time) {
	select {
	case <-s.Done():
	case <-time.After(o.exitWithin):
		broken = append(broken, fmt.Sprintf("sluice still running %s after SIGTERM", o.exitWithin))
		s.Kill()
	}
	return broken, time.Now()
}

// checkCalls judges the answers around the signal: calls started before
// it (the in-flight ones among them) get real answers, and no call waits
// longer than -answer-within.
func checkCalls(o options, calls []harness.Call, signalled time.Time) []string {
	var before, parked, after []harness.Call
	for _, c := range calls {
		if c.Start.Before(signalled) {
			before = append(before, c)
			if c.Start.Add(c.Latency).After(signalled) {
				parked = append(parked, c)
			}
		} else {
			after = append(after, c)
		}
	}
	byBefore := describe("started before SIGTERM", before)
	describe("in flight at SIGTERM", parked)
	describe("started after SIGTERM", after)

	var broken []string
	// 1. In-flight calls get real answers.
	if n := len(before) - byBefore[codes.OK]; n > 0 {
		broken = append(broken, fmt.Sprintf("%d calls started before SIGTERM failed (%s)", n, harness.CodeCounts(withoutOK(byBefore))))
	}
	if o.hold > 0 && len(parked) < o.callers {
		broken = append(broken, fmt.Sprintf("only %d calls were in flight at the signal, want every caller's (%d): the scenario did not test the drain", len(parked), o.callers))
	}
	// 2. Nothing hangs.
	var slow int
	var slowest time.Duration
	for _, c := range calls {
		if c.Latency > o.answerIn {
			slow++
			slowest = max(slowest, c.Latency)
		}
	}
	if slow > 0 {
		broken = append(broken, fmt.Sprintf("%d calls waited longer than %s (slowest %s)", slow, o.answerIn, slowest.Round(time.Millisecond)))
	}
	return broken
}

// describe logs a group of calls (answers by code, latency) and returns
// its answers by code.
func describe(name string, cs []harness.Call) map[codes.Code]int {
	by := map[codes.Code]int{}
	lat := make([]time.Duration, 0, len(cs))
	for _, c := range cs {
		by[c.Code]++
		lat = append(lat, c.Latency)
	}
	log.Printf("%-22s %6d calls %s; %s", name, len(cs), harness.CodeCounts(by), harness.Summarize(lat))
	return by
}

func withoutOK(m map[codes.Code]int) map[codes.Code]int {
	out := map[codes.Code]int{}
	for k, v := range m {
		if k != codes.OK {
			out[k] = v
		}
	}
	return out
}
