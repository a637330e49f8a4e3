package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/loadtest/internal/harness"
	"github.com/sluicehq/sluice/loadtest/internal/odataserver"
)

type options struct {
	bin        string
	rows       int
	attackers  int
	heavy      int
	duration   time.Duration
	every      time.Duration
	maxLatency time.Duration
	baseline   bool
}

func main() {
	harness.LogAs("odata-costly-filter")
	var o options
	flag.StringVar(&o.bin, "sluice", "bin/sluice", "the sluice binary")
	flag.IntVar(&o.rows, "rows", 50000, "rows of generated data")
	flag.IntVar(&o.attackers, "attackers", 8, "keys sending the over-budget filter (8: the size of the store's pool)")
	flag.IntVar(&o.heavy, "heavy", 2, "keys sending the costliest filter within the budget")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "how long the attack lasts")
	flag.DurationVar(&o.every, "every", 250*time.Millisecond, "the innocent key's request interval")
	flag.DurationVar(&o.maxLatency, "max-latency", 5*time.Second, "longest answer the innocent key may get")
	flag.BoolVar(&o.baseline, "baseline", false, "against a server without a filter budget: send the over-budget filter without expecting 400 (the run shows what the innocent key gets)")
	flag.Parse()
	if o.rows < 1000 || o.attackers < 1 || o.heavy < 0 || o.duration <= 0 || o.every <= 0 || o.maxLatency <= 0 {
		log.Fatal("-rows >= 1000; -attackers, -duration, -every and -max-latency positive")
	}
	harness.Verdict(run(o))
}

func endswiths(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("endswith(DOI,'%07d')", i)
	}
	return strings.Join(parts, " or ")
}

type answer struct {
	status int
	body   string
	took   time.Duration
	err    error
}

func get(c *http.Client, target, key string) answer {
	start := time.Now()
	req, err := http.NewRequest(http.MethodGet, target, nil)
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("x-api-key", key)
	resp, err := c.Do(req)
	if err != nil {
		return answer{err: err, took: time.Since(start)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, took: time.Since(start), err: err}
	if len(b) > 300 {
		b = b[:300]
	}
	a.body = string(b)
	return a
}

func run(o options) ([]string, error) {
	log.Printf("server: sluice odata, %d generated rows, %d attacker keys, %d heavy keys and 1 innocent key", o.rows, o.attackers, o.heavy)
	srv, err := odataserver.Start(o.bin, o.rows, o.attackers+o.heavy+1, 0)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	over := srv.Root + "/Observations?$top=10&$filter=" + url.QueryEscape(endswiths(256))
	within := srv.Root + "/Records?$top=10000&$filter=" + url.QueryEscape(endswiths(30))
	innocentURL := srv.Root + "/Observations?$top=1&$filter=" + url.QueryEscape("CharacteristicName eq 'pH'")
	c := &http.Client{Timeout: 2 * time.Minute}

	// Check the two attack filters are what they should be before the run.
	if a := get(c, over, srv.Keys[0]); a.status != 400 && !o.baseline {
		return nil, fmt.Errorf("the over-budget filter answered %d %s %v, want 400", a.status, a.body, a.err)
	}
	if a := get(c, within, srv.Keys[0]); a.status != 200 {
		return nil, fmt.Errorf("the within-budget filter answered %d %s %v, want 200", a.status, a.body, a.err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.duration)
	defer cancel()
	var mu sync.Mutex
	var broken []string
	brokenf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(broken) < 20 {
			broken = append(broken, fmt.Sprintf(format, args...))
		}
	}
	statuses := map[string]map[int]int{"over budget": {}, "within budget": {}, "innocent": {}}
	count := func(kind string, status int) { mu.Lock(); statuses[kind][status]++; mu.Unlock() }
	var overLat []time.Duration
	var wg sync.WaitGroup
	for i := range o.attackers + o.heavy {
		key := srv.Keys[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil && n < 100000; n++ {
				if i < o.attackers {
					a := get(c, over, key)
					count("over budget", a.status)
					if !o.baseline && (a.status != 400 || !strings.Contains(a.body, "budget")) {
						brokenf("attacker %d: over-budget filter answered %d %q %v", i, a.status, a.body, a.err)
					}
					mu.Lock()
					overLat = append(overLat, a.took)
					mu.Unlock()
					continue
				}
				a := get(c, within, key)
				count("within budget", a.status)
				if a.err != nil || a.status >= 500 && a.status != 503 {
					brokenf("attacker %d: within-budget filter answered %d %q %v", i, a.status, a.body, a.err)
				}
			}
		}()
	}
	var lat []time.Duration
	tick := time.NewTicker(o.every)
	defer tick.Stop()
	innocent := srv.Keys[o.attackers+o.heavy]
loop:
	for n := 0; n < 100000; n++ {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
		}
		a := get(c, innocentURL, innocent)
		count("innocent", a.status)
		lat = append(lat, a.took)
		if a.status != 200 || a.err != nil {
			brokenf("innocent request %d: %d %q %v after %s", n, a.status, a.body, a.err, a.took.Round(time.Millisecond))
		} else if a.took > o.maxLatency {
			brokenf("innocent request %d took %s (allowed %s)", n, a.took.Round(time.Millisecond), o.maxLatency)
		}
	}
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	sort.Slice(overLat, func(i, j int) bool { return overLat[i] < overLat[j] })
	for _, kind := range []string{"innocent", "over budget", "within budget"} {
		log.Printf("%-13s statuses %v", kind, statuses[kind])
	}
	if len(lat) == 0 {
		return nil, fmt.Errorf("the innocent key made no request")
	}
	log.Printf("innocent latency: %s", harness.Summarize(lat))
	if len(overLat) > 0 {
		log.Printf("over-budget filter latency: %s", harness.Summarize(overLat))
	}
	if o.heavy > 0 && statuses["within budget"][200] == 0 {
		broken = append(broken, "no within-budget costly filter was served: the attack did not load the database")
	}
	return broken, nil
}
