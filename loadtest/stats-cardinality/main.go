// Command stats-cardinality is a fault scenario: any
// caller can name statistics (a domain that is not configured, a
// detailed_metric value), and every reload can replace every rule. Neither
// may grow sluice's heap. Two phases, each on its own server:
//
//   - 100,000 distinct unknown domains (one in a hundred 64 KiB long) over
//     /json, with the flush that releases idle names an hour away: only the
//     bound on request-named statistics (SLUICE_STATS_MAX_DYNAMIC) can hold
//     the heap, so the phase fails on a server without it (-server-env
//     SLUICE_STATS_MAX_DYNAMIC=100000000 shows it).
//   - reloads of 50,000 changing rules, flushing every 500 ms: the
//     statistics of removed rules must go (-server-env
//     STATS_FLUSH_INTERVAL=1h, which keeps them, shows it failing).
//
// The heap after a forced GC must come back within a bound of its baseline
// within -settle: it is read until it does (released statistics go at the
// flush after next), never after a fixed sleep.
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
	domainsMiB int64
	reloadsMiB int64
	wait       time.Duration
	settle     time.Duration
	env        string
}

func main() {
	harness.LogAs("stats-cardinality")
	var o options
	flag.StringVar(&o.bin, "sluice", "bin/sluice", "sluice binary")
	flag.IntVar(&o.domains, "domains", 100_000, "distinct unknown domains sent")
	flag.IntVar(&o.reloads, "reloads", 20, "reloads, each replacing every rule")
	flag.IntVar(&o.rules, "rules", 50_000, "rules per configuration")
	flag.IntVar(&o.callers, "callers", 8, "concurrent /json callers")
	// 20,000 held names (the default bound) take about 5 MiB; all 100,000
	// about 26 MiB. 12 MiB tells the two apart with room either way.
	flag.Int64Var(&o.domainsMiB, "max-growth-domains-mib", 12, "largest heap growth (after GC) over the unknown domains that passes")
	flag.Int64Var(&o.reloadsMiB, "max-growth-reloads-mib", 32, "largest heap growth (after GC) over the reloads that passes")
	flag.DurationVar(&o.wait, "reload-wait", 60*time.Second, "longest wait for one reload")
	flag.DurationVar(&o.settle, "settle", time.Minute, "longest the heap may stay over the bound after the load (released statistics go at the flush after next)")
	flag.StringVar(&o.env, "server-env", "", "extra KEY=VALUE settings for sluice, comma-separated (SLUICE_STATS_MAX_DYNAMIC=100000000 shows the verdict failing without the bound)")
	flag.Parse()
	if o.domains < 1 || o.reloads < 1 || o.rules < 1 || o.callers < 1 || o.domainsMiB < 1 || o.reloadsMiB < 1 || o.wait <= 0 || o.settle <= 0 {
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

// server starts sluice with rules gen 0 of n rules, flushing (and with the
// flush releasing dropped statistics) every flush, and reads its heap once
// it has answered a first request: the baseline.
func server(o options, work string, client *http.Client, name string, n int, flush time.Duration) (s *testenv.Sluice, cfg testenv.SluiceConfig, base int64, err error) {
	cfg = testenv.DefaultSluiceConfig(filepath.Join(work, name))
	cfg.Bin = o.bin
	cfg.LogPath = filepath.Join(work, name+".log")
	cfg.LogLevel = "info" // reloads are counted from the log
	cfg.Env = append([]string{"DISABLE_STATS=true", "STATS_FLUSH_INTERVAL=" + flush.String()}, o.serverEnv()...)
	cfg.StartTimeout = 3 * time.Minute // 50,000 rules load slowly on a busy machine
	if err := testenv.WriteRules(cfg, ruleFile, rules(0, n)); err != nil {
		return nil, cfg, 0, err
	}
	if s, err = testenv.StartSluice(context.Background(), cfg); err != nil {
		return nil, cfg, 0, err
	}
	if err = post(client, s, "churn", "user", "warmup"); err == nil {
		base, err = leastHeap(client, s.Debug)
	}
	if err != nil {
		s.Kill()
		return nil, cfg, 0, err
	}
	log.Printf("%s: heap after GC with %d rules loaded: %d MiB", name, n, base>>20)
	return s, cfg, base, nil
}

const ruleFile = "churn.yaml"

func (o options) serverEnv() []string {
	var env []string
	for _, kv := range strings.Split(o.env, ",") {
		if kv = strings.TrimSpace(kv); kv != "" {
			env = append(env, kv)
		}
	}
	return env
}

func run(o options) ([]string, error) {
	work, err := os.MkdirTemp("", "sluice-stats-cardinality-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: o.callers}}
	var broken []string
	b, err := unknownDomains(o, work, client)
	if err != nil {
		return nil, err
	}
	broken = append(broken, b...)
	b, err = reloads(o, work, client)
	if err != nil {
		return nil, err
	}
	return append(broken, b...), nil
}

// unknownDomains is the first promise: the bound on request-named
// statistics alone holds the heap. The flush that would release idle names
// is an hour away, so only the bound (SLUICE_STATS_MAX_DYNAMIC) can keep
// 100,000 names from all being held when the heap is read.
func unknownDomains(o options, work string, client *http.Client) ([]string, error) {
	s, _, base, err := server(o, work, client, "domains", 10, time.Hour)
	if err != nil {
		return nil, err
	}
	defer s.Kill()
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
				if err := post(client, s, d, "k", "v"); err != nil {
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
	log.Printf("%d unknown domains sent in %s", o.domains, time.Since(start).Round(time.Millisecond))
	return judge(client, s, base, o.domainsMiB, o.settle, fmt.Sprintf("%d unknown domains", o.domains))
}

// reloads is the second promise: the statistics of rules a reload removed
// are released (by the flush after next, every 500 ms here).
func reloads(o options, work string, client *http.Client) ([]string, error) {
	s, cfg, base, err := server(o, work, client, "reloads", o.rules, 500*time.Millisecond)
	if err != nil {
		return nil, err
	}
	defer s.Kill()
	start := time.Now()
	for gen := 1; gen <= o.reloads; gen++ {
		before, err := s.CountLogLines("Successfully loaded new configuration")
		if err != nil {
			return nil, err
		}
		if err := replaceRules(cfg, rules(gen, o.rules)); err != nil {
			return nil, err
		}
		if err := waitLog(s, "Successfully loaded new configuration", before, o.wait); err != nil {
			return nil, fmt.Errorf("reload %d: %w", gen, err)
		}
		for u := 0; u < 50; u++ {
			if err := post(client, s, "churn", "user", fmt.Sprintf("g%d_u%d", gen, u)); err != nil {
				return nil, err
			}
		}
	}
	log.Printf("%d reloads of %d changing rules in %s", o.reloads, o.rules, time.Since(start).Round(time.Millisecond))
	return judge(client, s, base, o.reloadsMiB, o.settle, fmt.Sprintf("%d reloads of %d rules", o.reloads, o.rules))
}

// judge is a phase's verdict: the heap after GC comes back within growMiB
// of base within settle, and sluice then stops cleanly.
func judge(client *http.Client, s *testenv.Sluice, base, growMiB int64, settle time.Duration, over string) ([]string, error) {
	limit := base + growMiB<<20
	h, err := heapWithin(client, s.Debug, limit, settle)
	if err != nil {
		return nil, err
	}
	log.Printf("heap after GC over %s: %d MiB (from %d MiB, bound +%d MiB)", over, h>>20, base>>20, growMiB)
	var broken []string
	if h > limit {
		broken = append(broken, fmt.Sprintf("heap grew from %d to %d MiB over %s and stayed there for %s (bound +%d MiB)", base>>20, h>>20, over, settle, growMiB))
	}
	return harness.StopClean(broken, s, 15*time.Second), nil
}

// replaceRules puts a new rule file in place at once (written beside the
// watched directory, then renamed into it): one reload per generation. A
// rewrite in place (testenv.WriteRules) lets a busy server load the
// truncated file first, so the reload counted from the log could be that
// one while the full file was still loading.
func replaceRules(cfg testenv.SluiceConfig, yaml string) error {
	next := filepath.Join(cfg.RuntimeRoot, ruleFile+".next")
	if err := os.WriteFile(next, []byte(yaml), 0o644); err != nil {
		return err
	}
	return os.Rename(next, filepath.Join(cfg.ConfigDir(), ruleFile))
}

func post(client *http.Client, s *testenv.Sluice, domain, key, value string) error {
	body, _ := json.Marshal(map[string]any{"domain": domain, "descriptors": []any{map[string]any{"entries": []any{map[string]string{"key": key, "value": value}}}}})
	resp, err := client.Post("http://"+s.HTTP+"/json", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

// leastHeap is the least of three readings of an idle server: the baseline.
// A reading can only be too high (a flush or a request in progress holds
// memory for a moment), so the least is the live heap.
func leastHeap(client *http.Client, debug string) (int64, error) {
	var least int64
	for i := 0; i < 3; i++ {
		h, err := heapAfterGC(client, debug)
		if err != nil {
			return 0, err
		}
		if i == 0 || h < least {
			least = h
		}
	}
	return least, nil
}

// heapWithin reads the heap after GC until a reading is within limit, or
// settle has passed: what is released (the flush after next drops released
// statistics) gets the time to go, and only a heap that stays above the
// limit for all of settle breaks the promise. It returns the least reading.
func heapWithin(client *http.Client, debug string, limit int64, settle time.Duration) (int64, error) {
	deadline := time.Now().Add(settle)
	var first, least int64
	for i := 0; ; i++ {
		h, err := heapAfterGC(client, debug)
		if err != nil {
			return 0, err
		}
		if i == 0 {
			first = h
		}
		if i == 0 || h < least {
			least = h
		}
		if least <= limit || time.Now().After(deadline) {
			log.Printf("heap read %d times over %s (first reading %d MiB)", i+1, settle-time.Until(deadline).Round(time.Millisecond), first>>20)
			return least, nil
		}
		time.Sleep(250 * time.Millisecond)
	}
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
