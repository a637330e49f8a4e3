package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/loadtest/internal/harness"
)

const rules = `domain: soak
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: tenant
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 100000}
`

var (
	rssRule = harness.GrowthRule{Relative: 0.20, Absolute: 16 << 20, MinSamples: 6}
	gorRule = harness.GrowthRule{Relative: 0.10, Absolute: 10, MinSamples: 6}
)

type options struct {
	bin      string
	backend  string
	duration time.Duration
	interval time.Duration
	callers  int
	pause    time.Duration
	csv      string
}

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("soak: ")
	var o options
	flag.StringVar(&o.bin, "sluice", "bin/sluice", "sluice binary")
	flag.StringVar(&o.backend, "backend", "redis", "redis or memory")
	flag.DurationVar(&o.duration, "duration", 10*time.Minute, "how long to soak")
	flag.DurationVar(&o.interval, "interval", 10*time.Second, "time between samples")
	flag.IntVar(&o.callers, "callers", 8, "gRPC callers (plus 2 HTTP callers and one redialling caller)")
	flag.DurationVar(&o.pause, "pause", 2*time.Millisecond, "each caller's pause between calls, to keep the load steady rather than maximal")
	flag.StringVar(&o.csv, "csv", "", "also write the samples to this CSV file")
	flag.Parse()
	switch {
	case o.backend != "redis" && o.backend != "memory":
		log.Fatal("-backend must be redis or memory")
	case o.duration < o.interval || o.interval <= 0 || o.callers < 1 || o.pause < 0:
		log.Fatal("-interval must be positive and at most -duration; -callers at least 1; -pause not negative")
	}
	harness.Verdict(run(o))
}

type sample struct {
	at         time.Duration
	rss        int64
	goroutines int
	calls      uint64
	failed     uint64
}

// tally counts answers without keeping them: a soak makes millions.
type tally struct {
	ok, over, failed atomic.Uint64
	mu               sync.Mutex
	first            map[codes.Code]string
}

func (t *tally) record(_ int, c harness.Call, err error) {
	switch {
	case err != nil:
		t.failed.Add(1)
		t.mu.Lock()
		if _, seen := t.first[c.Code]; !seen {
			t.first[c.Code] = err.Error()
		}
		t.mu.Unlock()
	case c.Over:
		t.over.Add(1)
	default:
		t.ok.Add(1)
	}
}

// run keeps sluice under a steady mixed load for -duration, sampling its
// memory and goroutines, then judges their growth and the answers.
func run(o options) ([]string, error) {
	sc, err := harness.NewScenario("soak", o.bin, o.backend)
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	ctx := context.Background()
	s, client, err := sc.StartRLS(ctx, "soak.yaml", rules)
	if err != nil {
		return nil, err
	}

	mc := &mixedCaller{n: o.callers, client: client, http: &http.Client{Timeout: 10 * time.Second}, s: s}
	defer mc.close()
	t := &tally{first: map[codes.Code]string{}}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loadDone := make(chan error, 1)
	lc := harness.LoadConfig{Callers: o.callers + 3, Duration: o.duration + time.Minute, MaxCallsPerCaller: 1 << 40, Pause: o.pause}
	go func() { loadDone <- harness.RunLoad(loadCtx, lc, mc.call, t.record) }()

	start := time.Now()
	samples, csv, sampleErr := sampleFor(ctx, o, s, t, start)
	stopLoad()
	if err := <-loadDone; err != nil {
		return nil, err
	}
	if sampleErr != nil {
		return nil, fmt.Errorf("sampling: %w; sluice log tail:\n%s", sampleErr, s.LogTail(10))
	}
	if o.csv != "" {
		if err := os.WriteFile(o.csv, csv, 0o644); err != nil {
			return nil, err
		}
	}

	broken := judgeGrowth(samples)
	total := t.ok.Load() + t.over.Load() + t.failed.Load()
	log.Printf("%d calls in %s: %d OK, %d OVER_LIMIT, %d failed", total, time.Since(start).Round(time.Second), t.ok.Load(), t.over.Load(), t.failed.Load())
	if t.failed.Load() > 0 {
		t.mu.Lock()
		broken = append(broken, fmt.Sprintf("%d calls failed; first errors: %v", t.failed.Load(), t.first))
		t.mu.Unlock()
	}
	if t.over.Load() == 0 {
		broken = append(broken, "no OVER_LIMIT answer: the load did not exercise limits")
	}
	broken = harness.StopClean(broken, s, 15*time.Second)
	return broken, nil
}

// mixedCaller makes the soak's calls. Callers 0..n-1 use the shared
// connection, n and n+1 call /json, n+2 redials every 100 calls (it is the
// only caller touching redial state).
type mixedCaller struct {
	n           int
	client      rlsv3.RateLimitServiceClient
	http        *http.Client
	s           *testenv.Sluice
	seq         atomic.Uint64
	redial      *grpc.ClientConn
	redialCalls int
}

func (m *mixedCaller) call(ctx context.Context, caller int) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	i := m.seq.Add(1)
	req := harness.Request("soak",
		harness.Descriptor("k", fmt.Sprint(i%100_000)),
		harness.Descriptor("user", fmt.Sprint(i%64)),
		harness.Descriptor("tenant", fmt.Sprint(i%10), "path", fmt.Sprintf("/p/%d", i%500)))
	switch {
	case caller < m.n:
		return harness.Decide(ctx, m.client, req)
	case caller < m.n+2:
		return jsonCall(ctx, m.http, m.s.HTTP, i)
	default:
		if m.redial == nil || m.redialCalls == 100 {
			if m.redial != nil {
				m.redial.Close()
			}
			c, err := harness.Dial(m.s.GRPC)
			if err != nil {
				return false, err
			}
			m.redial, m.redialCalls = c, 0
		}
		m.redialCalls++
		return harness.Decide(ctx, rlsv3.NewRateLimitServiceClient(m.redial), req)
	}
}

// close closes the redialling caller's connection; call it after the load
// has stopped.
func (m *mixedCaller) close() {
	if m.redial != nil {
		m.redial.Close()
	}
}

// sampleFor samples sluice every -interval until -duration is covered,
// logging each sample, and returns the samples and their CSV.
func sampleFor(ctx context.Context, o options, s *testenv.Sluice, t *tally, start time.Time) ([]sample, []byte, error) {
	var samples []sample
	var csv bytes.Buffer
	csv.WriteString("seconds,rss_bytes,goroutines,calls,failed\n")
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	for len(samples) < int(o.duration/o.interval) {
		<-tick.C
		sp := sample{at: time.Since(start)}
		var err error
		if sp.rss, err = testenv.RSS(s.PID()); err != nil {
			return samples, csv.Bytes(), err
		}
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		sp.goroutines, err = harness.Goroutines(gctx, s.Debug)
		cancel()
		if err != nil {
			return samples, csv.Bytes(), err
		}
		sp.calls = t.ok.Load() + t.over.Load() + t.failed.Load()
		sp.failed = t.failed.Load()
		samples = append(samples, sp)
		fmt.Fprintf(&csv, "%.0f,%d,%d,%d,%d\n", sp.at.Seconds(), sp.rss, sp.goroutines, sp.calls, sp.failed)
		rate := 0.0
		if len(samples) > 1 {
			prev := samples[len(samples)-2]
			rate = float64(sp.calls-prev.calls) / (sp.at - prev.at).Seconds()
		}
		log.Printf("+%4.0fs rss %6.1f MiB  goroutines %4d  calls %9d (%6.0f/s)  failed %d",
			sp.at.Seconds(), float64(sp.rss)/(1<<20), sp.goroutines, sp.calls, rate, sp.failed)
	}
	return samples, csv.Bytes(), nil
}

// judgeGrowth checks that resident memory and goroutines stayed flat over
// the samples (rssRule, gorRule) and logs each verdict.
func judgeGrowth(samples []sample) []string {
	var broken []string
	rss := make([]float64, len(samples))
	gor := make([]float64, len(samples))
	for i, sp := range samples {
		rss[i], gor[i] = float64(sp.rss), float64(sp.goroutines)
	}
	judge := func(name string, rule harness.GrowthRule, v []float64, unit float64, suffix string) {
		g := rule.Check(v)
		if !g.Judged {
			log.Printf("%s: %d samples, fewer than %d: not judged", name, len(v), rule.MinSamples)
			return
		}
		verdict := "flat"
		if g.Grew {
			verdict = "GREW"
			broken = append(broken, fmt.Sprintf("%s grew: last-third median %.1f%s > limit %.1f%s (first-third median %.1f%s)",
				name, g.LastMedian/unit, suffix, g.Limit/unit, suffix, g.FirstMedian/unit, suffix))
		}
		log.Printf("%s: first-third median %.1f%s, last-third median %.1f%s, limit %.1f%s: %s",
			name, g.FirstMedian/unit, suffix, g.LastMedian/unit, suffix, g.Limit/unit, suffix, verdict)
	}
	judge("RSS", rssRule, rss, 1<<20, " MiB")
	judge("goroutines", gorRule, gor, 1, "")
	return broken
}

// jsonCall posts one decision to /json; 200 is OK, 429 is OVER_LIMIT, and
// anything else is an error carrying the matching gRPC-like code.
func jsonCall(ctx context.Context, c *http.Client, addr string, i uint64) (bool, error) {
	body := fmt.Sprintf(`{"domain":"soak","descriptors":[{"entries":[{"key":"k","value":"%d"}]},{"entries":[{"key":"user","value":"%d"}]}]}`, i%100_000, i%64)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/json", strings.NewReader(body))
	if err != nil {
		return false, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return false, status.Error(codes.Unavailable, err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch resp.StatusCode {
	case http.StatusOK:
		return false, nil
	case http.StatusTooManyRequests:
		return true, nil
	}
	return false, status.Errorf(codes.Unknown, "/json answered %d: %s", resp.StatusCode, bytes.TrimSpace(b))
}
