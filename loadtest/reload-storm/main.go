package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"sort"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/loadtest/internal/harness"
)

const (
	okLine  = "Successfully loaded new configuration"
	errLine = "Error loading new configuration"
)

// badFiles are refused by sluice's loader, each for a different reason.
var badFiles = []string{
	"domain: storm\ndescriptors:\n  - key: load\n    rate_limit: {unit: lightyear, requests_per_unit: 1}\n",
	"domain: storm\ndescriptors: [ {key: load, rate_limit: {unit: hour\n", // YAML syntax
	"domain: storm\nunit: hour\ndescriptors:\n  - key: load\n",            // a known key in the wrong place
	"", // empty: no domain
	"domain: storm\ndescriptors:\n  - rate_limit: {unit: hour, requests_per_unit: 5}\n", // descriptor without a key
	"domain: storm\ndescriptors:\n  - key: load\n    rate_limit: {unit: hour, requests_per_unit: -3}\n",
}

// goodFile is configuration i: the load key stays effectively unlimited, the
// probe limit is the marker, and the rest changes the shape of the tree.
func goodFile(i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain: storm\ndescriptors:\n")
	fmt.Fprintf(&b, "  - key: load\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", 1_000_000_000+i)
	fmt.Fprintf(&b, "  - key: probe\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", probeLimit(i))
	for j := range i % 7 {
		fmt.Fprintf(&b, "  - key: extra%d\n    value: v%d\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", j, i, 10+j)
	}
	return b.String()
}

func probeLimit(i int) int { return 20 + i }

// isBad says which writes are bad files: every third, and the last one, so
// that "the last good configuration" is not simply the last write.
func isBad(i, n int) bool { return i%3 == 1 || i == n-1 }

type options struct {
	bin     string
	reloads int
	callers int
	wait    time.Duration
}

func main() {
	harness.LogAs("reload-storm")
	var o options
	flag.StringVar(&o.bin, "sluice", "bin/sluice", "sluice binary")
	flag.IntVar(&o.reloads, "reloads", 100, "rule file rewrites")
	flag.IntVar(&o.callers, "callers", 8, "concurrent callers during the storm")
	flag.DurationVar(&o.wait, "reload-wait", 5*time.Second, "longest wait for sluice to react to one write")
	flag.Parse()
	if o.reloads < 3 || o.callers < 1 || o.wait <= 0 {
		log.Fatal("-reloads must be at least 3, -callers at least 1, -reload-wait positive")
	}
	harness.Verdict(run(o))
}

// run starts sluice under load, rewrites its rule file o.reloads times,
// then checks the three promises of the doc: no failed request, every
// write seen, the last good file enforced.
func run(o options) ([]string, error) {
	sc, err := harness.NewScenario("reload-storm", o.bin, "memory")
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	sc.Sluice.LogLevel = "info"
	ctx := context.Background()
	s, client, err := sc.StartRLS(ctx, ruleFile, goodFile(0))
	if err != nil {
		return nil, err
	}

	call := func(ctx context.Context, caller int) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return harness.Decide(ctx, client, harness.Request("storm", harness.Descriptor("load", fmt.Sprint(caller))))
	}
	rec := harness.NewRecorder(o.callers)
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan error, 1)
	lc := harness.LoadConfig{Callers: o.callers, Duration: time.Duration(o.reloads)*o.wait + time.Minute, MaxCallsPerCaller: 10_000_000}
	go func() { loadDone <- harness.RunLoad(loadCtx, lc, call, rec.Record) }()

	start := time.Now()
	broken, lastGood, stormErr := storm(o, s, sc.Sluice)
	stormTook := time.Since(start)
	stopLoad()
	if err := <-loadDone; err != nil {
		return nil, err
	}
	if stormErr != nil {
		return nil, stormErr
	}
	okN, errN, _ := counts(s)
	log.Printf("%d writes in %s: %d successful loads (1 at startup), %d refused", o.reloads, stormTook.Round(time.Millisecond), okN, errN)

	broken = append(broken, checkLoad(rec)...)
	enforced, err := checkLastGood(o, s, client, lastGood)
	if err != nil {
		return nil, err
	}
	broken = append(broken, enforced...)
	if len(broken) > 0 {
		log.Printf("sluice log tail:\n%s", s.LogTail(10))
	}
	broken = harness.StopClean(broken, s, 15*time.Second)
	return broken, nil
}

// ruleFile is the file under sluice's runtime directory that the storm
// rewrites.
const ruleFile = "storm.yaml"

// storm writes the rule files one by one, each after sluice has reacted to
// the last, and checks promise 2: each write is followed by exactly the
// reload outcome it deserves. It returns what was wrong and the index of
// the last good file written.
func storm(o options, s *testenv.Sluice, cfg testenv.SluiceConfig) (broken []string, lastGood int, err error) {
	for i := 1; i <= o.reloads; i++ {
		okBefore, errBefore, err := counts(s)
		if err != nil {
			return broken, lastGood, err
		}
		bad := isBad(i, o.reloads+1)
		body := goodFile(i)
		if bad {
			body = badFiles[i%len(badFiles)]
		} else {
			lastGood = i
		}
		if err := testenv.WriteRules(cfg, ruleFile, body); err != nil {
			return broken, lastGood, err
		}
		okAfter, errAfter, err := waitReload(s, okBefore+errBefore, o.wait)
		if err != nil {
			broken = append(broken, fmt.Sprintf("write %d (bad=%v): %v", i, bad, err))
			continue
		}
		switch {
		case bad && (errAfter-errBefore != 1 || okAfter != okBefore):
			broken = append(broken, fmt.Sprintf("write %d (bad file): %d successful and %d failed loads, want 0 and 1", i, okAfter-okBefore, errAfter-errBefore))
		case !bad && (okAfter-okBefore != 1 || errAfter != errBefore):
			broken = append(broken, fmt.Sprintf("write %d (good file): %d successful and %d failed loads, want 1 and 0", i, okAfter-okBefore, errAfter-errBefore))
		}
	}
	return broken, lastGood, nil
}

// checkLoad checks promise 1: every call during the storm was answered OK
// and none was over the limit of the unlimited load key.
func checkLoad(rec *harness.Recorder) []string {
	calls := rec.Calls()
	failed := map[codes.Code]int{}
	var over int
	lat := make([]time.Duration, 0, len(calls))
	for _, c := range calls {
		lat = append(lat, c.Latency)
		switch {
		case c.Code != codes.OK:
			failed[c.Code]++
		case c.Over:
			over++
		}
	}
	log.Printf("load during the storm: %d calls, %s", len(calls), harness.Summarize(lat))
	var broken []string
	if len(calls) == 0 {
		broken = append(broken, "no call was made during the storm")
	}
	if len(failed) > 0 {
		var parts []string
		for code, n := range failed {
			parts = append(parts, fmt.Sprintf("%s=%d", code, n))
		}
		sort.Strings(parts)
		broken = append(broken, fmt.Sprintf("calls failed during the storm: %s; first errors %v", strings.Join(parts, " "), rec.FirstErrors()))
	}
	if over > 0 {
		broken = append(broken, fmt.Sprintf("%d calls were OVER_LIMIT on an effectively unlimited key", over))
	}
	return broken
}

// checkLastGood checks promise 3: the last good file's probe limit shows in
// /rlconfig and is the one enforced.
func checkLastGood(o options, s *testenv.Sluice, client rlsv3.RateLimitServiceClient, lastGood int) ([]string, error) {
	want := probeLimit(lastGood)
	dump, err := get("http://" + s.Debug + "/rlconfig")
	if err != nil {
		return nil, err
	}
	var broken []string
	if marker := fmt.Sprintf("storm.probe: unit=HOUR requests_per_unit=%d,", want); !strings.Contains(dump, marker) {
		broken = append(broken, fmt.Sprintf("/rlconfig lacks %q (write %d was the last good file); it shows:\n%s", marker, lastGood, dump))
	}
	if err := checkEnforced(client, want); err != nil {
		broken = append(broken, err.Error())
	} else {
		log.Printf("enforced: probe limit %d of good write %d (the last of the %d writes was a bad file)", want, lastGood, o.reloads)
	}
	return broken, nil
}

func counts(s *testenv.Sluice) (ok, failed int, err error) {
	if ok, err = s.CountLogLines(okLine); err != nil {
		return 0, 0, err
	}
	failed, err = s.CountLogLines(errLine)
	return ok, failed, err
}

// waitReload waits until sluice has logged one more load outcome than
// before, then a little longer, so an event burst that gives two reloads
// for one write is seen and reported rather than leaking into the next.
func waitReload(s *testenv.Sluice, before int, wait time.Duration) (ok, failed int, err error) {
	deadline := time.Now().Add(wait)
	for {
		ok, failed, err = counts(s)
		if err != nil {
			return 0, 0, err
		}
		if ok+failed > before {
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("no reload logged within %s", wait)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Longer than the watcher's settle time (20 ms), so a second reload
	// for the same write would have happened by now.
	time.Sleep(60 * time.Millisecond)
	return counts(s)
}

// checkEnforced spends limit calls of a fresh probe value, which must all
// be OK with that limit, then one more, which must be OVER_LIMIT. A check
// that crosses an hour boundary (a new window) is repeated once.
func checkEnforced(client rlsv3.RateLimitServiceClient, limit int) error {
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		hour := time.Now().UTC().Truncate(time.Hour)
		value := fmt.Sprintf("check-%d-%d", time.Now().UnixNano(), attempt)
		err = func() error {
			for n := 1; n <= limit+1; n++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := client.ShouldRateLimit(ctx, harness.Request("storm", harness.Descriptor("probe", value)))
				cancel()
				if err != nil {
					return fmt.Errorf("probe call %d: %w", n, err)
				}
				st := resp.GetStatuses()
				if len(st) != 1 || st[0].GetCurrentLimit().GetRequestsPerUnit() != uint32(limit) {
					return fmt.Errorf("probe call %d: answer carries limit %v, want %d", n, st, limit)
				}
				if wantOver := n > limit; (resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT) != wantOver {
					return fmt.Errorf("probe call %d of a %d/hour limit answered %s", n, limit, resp.GetOverallCode())
				}
			}
			return nil
		}()
		if err == nil || time.Now().UTC().Truncate(time.Hour).Equal(hour) {
			return err
		}
	}
	return err
}

func get(url string) (string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
