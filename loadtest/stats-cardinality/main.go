// Command stats-cardinality is the fault scenario of issue 12, item 1: any
// caller can name statistics (a domain that is not configured, a
// detailed_metric value), and every reload can replace every rule. Neither
// may grow sluice's heap: 100,000 distinct unknown domains (one in a hundred
// 64 KiB long) over /json, then reloads of 50,000 changing rules, and the
// heap after a GC must stay within a bound of where it started.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/loadtest/internal/harness"
)

type options struct {
	bin        string
	domains    int
	reloads    int
	rules      int
	callers    int
	maxGrowMiB int64
	wait       time.Duration
}

func main() {
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	log.SetPrefix("stats-cardinality: ")
	var o options
	flag.StringVar(&o.bin, "sluice", "bin/sluice", "sluice binary")
	flag.IntVar(&o.domains, "domains", 100_000, "distinct unknown domains sent")
	flag.IntVar(&o.reloads, "reloads", 20, "reloads, each replacing every rule")
	flag.IntVar(&o.rules, "rules", 50_000, "rules per configuration")
	flag.IntVar(&o.callers, "callers", 8, "concurrent /json callers")
	flag.Int64Var(&o.maxGrowMiB, "max-growth-mib", 32, "largest heap growth (after GC) that passes")
	flag.DurationVar(&o.wait, "reload-wait", 60*time.Second, "longest wait for one reload")
	flag.Parse()
	if o.domains < 1 || o.reloads < 1 || o.rules < 1 || o.callers < 1 || o.maxGrowMiB < 1 || o.wait <= 0 {
		log.Fatal("every flag must be positive")
	}
	harness.Verdict(run(o))
}

func rules(gen, n int) string {
	var b strings.Builder
	b.WriteString("domain: churn\ndescriptors:\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  - key: k\n    value: g%d_r%d\n    rate_limit: {unit: minute, requests_per_unit: 10}\n", gen, i)
	}
	b.WriteString("  - key: user\n    detailed_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 10}\n")
	return b.String()
}

func run(o options) ([]string, error) {
	work, err := os.MkdirTemp("", "sluice-stats-cardinality-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	cfg := testenv.DefaultSluiceConfig(filepath.Join(work, "runtime"))
	cfg.Bin = o.bin
	cfg.LogPath = filepath.Join(work, "sluice.log")
	cfg.LogLevel = "info" // reloads are counted from the log
	// No sink, but flushes (and with them the release of dropped stats) every 500 ms.
	cfg.Env = []string{"DISABLE_STATS=true", "STATS_FLUSH_INTERVAL=500ms"}
	cfg.StartTimeout = 3 * time.Minute // 50,000 rules load slowly on a busy machine
	const file = "churn.yaml"
	if err := testenv.WriteRules(cfg, file, rules(0, o.rules)); err != nil {
		return nil, err
	}
	s, err := testenv.StartSluice(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	defer s.Kill()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: o.callers}}
	post := func(domain, key, value string) error {
		body, _ := json.Marshal(map[string]any{"domain": domain, "descriptors": []any{map[string]any{"entries": []any{map[string]string{"key": key, "value": value}}}}})
		resp, err := client.Post("http://"+s.HTTP+"/json", "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil
	}
	// The least of three readings a second apart, after the service has
	// settled for a few flushes: a reload or a flush in progress holds
	// memory for a moment that is not retained.
	heap := func() (int64, error) {
		time.Sleep(3 * time.Second)
		var least int64
		for i := 0; i < 3; i++ {
			if i > 0 {
				time.Sleep(time.Second)
			}
			h, err := heapAfterGC(client, s.Debug)
			if err != nil {
				return 0, err
			}
			if i == 0 || h < least {
				least = h
			}
		}
		return least, nil
	}
	if err := post("churn", "user", "warmup"); err != nil {
		return nil, err
	}
	base, err := heap()
	if err != nil {
		return nil, err
	}
	log.Printf("heap after GC with %d rules loaded: %d MiB", o.rules, base>>20)

	// 1. Unknown domains.
	start := time.Now()
	long := strings.Repeat("x", 64<<10)
	var wg sync.WaitGroup
	errs := make(chan error, o.callers)
	for c := 0; c < o.callers; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := c; i < o.domains; i += o.callers {
				d := fmt.Sprintf("unknown-%d", i)
				if i%100 == 0 {
					d += long
				}
				if err := post(d, "k", "v"); err != nil {
					errs <- err
					return
				}
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, fmt.Errorf("sending unknown domains: %w", err)
	}
	afterDomains, err := heap()
	if err != nil {
		return nil, err
	}
	log.Printf("%d unknown domains in %s; heap after GC: %d MiB", o.domains, time.Since(start).Round(time.Millisecond), afterDomains>>20)

	// 2. Reloads that replace every rule, with request-named stats between.
	start = time.Now()
	for gen := 1; gen <= o.reloads; gen++ {
		before, err := s.CountLogLines("Successfully loaded new configuration")
		if err != nil {
			return nil, err
		}
		if err := testenv.WriteRules(cfg, file, rules(gen, o.rules)); err != nil {
			return nil, err
		}
		if err := waitLog(s, "Successfully loaded new configuration", before, o.wait); err != nil {
			return nil, fmt.Errorf("reload %d: %w", gen, err)
		}
		for u := 0; u < 50; u++ {
			if err := post("churn", "user", fmt.Sprintf("g%d_u%d", gen, u)); err != nil {
				return nil, err
			}
		}
	}
	end, err := heap()
	if err != nil {
		return nil, err
	}
	log.Printf("%d reloads of %d changing rules in %s; heap after GC: %d MiB (from %d MiB)",
		o.reloads, o.rules, time.Since(start).Round(time.Millisecond), end>>20, base>>20)

	var broken []string
	limit := base + o.maxGrowMiB<<20
	if afterDomains > limit {
		broken = append(broken, fmt.Sprintf("heap grew from %d to %d MiB over %d unknown domains (bound +%d MiB)", base>>20, afterDomains>>20, o.domains, o.maxGrowMiB))
	}
	if end > limit {
		broken = append(broken, fmt.Sprintf("heap grew from %d to %d MiB over %d reloads of %d rules (bound +%d MiB)", base>>20, end>>20, o.reloads, o.rules, o.maxGrowMiB))
	}
	if err := s.Stop(15 * time.Second); err != nil {
		broken = append(broken, err.Error())
	}
	return broken, nil
}

// heapAfterGC forces a collection (pprof's heap profile with gc=1) and reads
// the live heap from the debug port's memstats.
func heapAfterGC(c *http.Client, debug string) (int64, error) {
	resp, err := c.Get("http://" + debug + "/debug/pprof/heap?gc=1")
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	resp, err = c.Get("http://" + debug + "/stats")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "memstats: "); ok {
			var m struct{ HeapAlloc int64 }
			if err := json.Unmarshal([]byte(v), &m); err != nil {
				return 0, fmt.Errorf("memstats: %w", err)
			}
			return m.HeapAlloc, nil
		}
	}
	return 0, errors.New("the debug port's /stats has no memstats")
}

func waitLog(s *testenv.Sluice, line string, before int, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		n, err := s.CountLogLines(line)
		if err != nil {
			return err
		}
		if n > before {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %q within %s", line, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
