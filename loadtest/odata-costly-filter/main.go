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

// run starts the OData API, checks the two attack filters, then lets the
// attackers send them while the innocent key reads at its pace, and judges
// what the innocent key got.
func run(o options) ([]string, error) {
	log.Printf("server: sluice odata, %d generated rows, %d attacker keys, %d heavy keys and 1 innocent key", o.rows, o.attackers, o.heavy)
	srv, err := odataserver.Start(o.bin, o.rows, o.attackers+o.heavy+1, 0)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	a := &attack{
		o:        o,
		c:        &http.Client{Timeout: 2 * time.Minute},
		keys:     srv.Keys,
		over:     srv.Root + "/Observations?$top=10&$filter=" + url.QueryEscape(endswiths(256)),
		within:   srv.Root + "/Records?$top=10000&$filter=" + url.QueryEscape(endswiths(30)),
		innocent: srv.Root + "/Observations?$top=1&$filter=" + url.QueryEscape("CharacteristicName eq 'pH'"),
		statuses: map[string]map[int]int{"over budget": {}, "within budget": {}, "innocent": {}},
	}

	// Check the two attack filters are what they should be before the run.
	if r := get(a.c, a.over, srv.Keys[0]); r.status != 400 && !o.baseline {
		return nil, fmt.Errorf("the over-budget filter answered %d %s %v, want 400", r.status, r.body, r.err)
	}
	if r := get(a.c, a.within, srv.Keys[0]); r.status != 200 {
		return nil, fmt.Errorf("the within-budget filter answered %d %s %v, want 200", r.status, r.body, r.err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.duration)
	defer cancel()
	var wg sync.WaitGroup
	for i := range o.attackers + o.heavy {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.attacker(ctx, i)
		}()
	}
	lat := a.innocentReads(ctx)
	wg.Wait()
	return a.verdict(lat)
}

// attack is the shared state of one run: the three requests, the keys, and
// what the clients saw.
type attack struct {
	o                      options
	c                      *http.Client
	keys                   []string
	over, within, innocent string // URLs

	mu       sync.Mutex
	broken   []string
	statuses map[string]map[int]int // by kind of request, by HTTP status
	overLat  []time.Duration
}

// brokenf notes a failure; the first 20 are kept.
func (a *attack) brokenf(format string, args ...any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.broken) < 20 {
		a.broken = append(a.broken, fmt.Sprintf(format, args...))
	}
}

func (a *attack) count(kind string, status int) {
	a.mu.Lock()
	a.statuses[kind][status]++
	a.mu.Unlock()
}

// attacker i sends its filter until ctx ends: the over-budget one (which
// must be refused with 400) for the first -attackers keys, the costliest
// within budget for the -heavy keys after them (which may be shed with 503,
// but no other 5xx or transport error).
func (a *attack) attacker(ctx context.Context, i int) {
	key := a.keys[i]
	for n := 0; ctx.Err() == nil && n < 100000; n++ {
		if i < a.o.attackers {
			r := get(a.c, a.over, key)
			a.count("over budget", r.status)
			if !a.o.baseline && (r.status != 400 || !strings.Contains(r.body, "budget")) {
				a.brokenf("attacker %d: over-budget filter answered %d %q %v", i, r.status, r.body, r.err)
			}
			a.mu.Lock()
			a.overLat = append(a.overLat, r.took)
			a.mu.Unlock()
			continue
		}
		r := get(a.c, a.within, key)
		a.count("within budget", r.status)
		if r.err != nil || r.status >= 500 && r.status != 503 {
			a.brokenf("attacker %d: within-budget filter answered %d %q %v", i, r.status, r.body, r.err)
		}
	}
}

// innocentReads makes the innocent key's request every -every until ctx
// ends; each must be answered 200 within -max-latency. It returns their
// latencies.
func (a *attack) innocentReads(ctx context.Context) []time.Duration {
	var lat []time.Duration
	tick := time.NewTicker(a.o.every)
	defer tick.Stop()
	innocent := a.keys[a.o.attackers+a.o.heavy]
	for n := 0; n < 100000; n++ {
		select {
		case <-ctx.Done():
			return lat
		case <-tick.C:
		}
		r := get(a.c, a.innocent, innocent)
		a.count("innocent", r.status)
		lat = append(lat, r.took)
		if r.status != 200 || r.err != nil {
			a.brokenf("innocent request %d: %d %q %v after %s", n, r.status, r.body, r.err, r.took.Round(time.Millisecond))
		} else if r.took > a.o.maxLatency {
			a.brokenf("innocent request %d took %s (allowed %s)", n, r.took.Round(time.Millisecond), a.o.maxLatency)
		}
	}
	return lat
}

// verdict logs what each kind of request got and returns what was wrong;
// call it after every client has stopped.
func (a *attack) verdict(lat []time.Duration) ([]string, error) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	sort.Slice(a.overLat, func(i, j int) bool { return a.overLat[i] < a.overLat[j] })
	for _, kind := range []string{"innocent", "over budget", "within budget"} {
		log.Printf("%-13s statuses %v", kind, a.statuses[kind])
	}
	if len(lat) == 0 {
		return nil, fmt.Errorf("the innocent key made no request")
	}
	log.Printf("innocent latency: %s", harness.Summarize(lat))
	if len(a.overLat) > 0 {
		log.Printf("over-budget filter latency: %s", harness.Summarize(a.overLat))
	}
	broken := a.broken
	if a.o.heavy > 0 && a.statuses["within budget"][200] == 0 {
		broken = append(broken, "no within-budget costly filter was served: the attack did not load the database")
	}
	return broken, nil
}
