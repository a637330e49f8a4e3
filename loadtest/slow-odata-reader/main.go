package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/loadtest/internal/harness"
	"github.com/sluicehq/sluice/loadtest/internal/odataserver"
)

type options struct {
	bin     string
	server  string
	url     string
	keys    string
	pid     int
	rows    int
	top     int
	readers int
	slow    time.Duration
	rate    int
	share   float64
}

func main() {
	harness.LogAs("slow-odata-reader")
	var o options
	flag.StringVar(&o.server, "server", "self", "self (an OData server in a child process) or external (-url, -keys, -pid)")
	flag.StringVar(&o.url, "url", "", "external: OData service root, e.g. http://127.0.0.1:8000/v1/odata/v4")
	flag.StringVar(&o.keys, "keys", "", "external: comma-separated API keys, at least -readers of them")
	flag.IntVar(&o.pid, "pid", 0, "external: the server's process id, for its RSS")
	flag.IntVar(&o.rows, "rows", 12000, "self: rows of generated data (at least -top)")
	flag.IntVar(&o.top, "top", 10000, "rows per page ($top)")
	flag.IntVar(&o.readers, "readers", 8, "concurrent slow readers")
	flag.DurationVar(&o.slow, "slow", 30*time.Second, "how long the readers crawl")
	flag.IntVar(&o.rate, "rate", 32<<10, "bytes per second each reader takes while crawling")
	flag.Float64Var(&o.share, "allow-share", 0.5, "RSS growth allowed while readers crawl, as a share of readers × page size")
	flag.StringVar(&o.bin, "sluice", "bin/sluice", "the sluice binary that serves the OData API")
	flag.Parse()
	switch {
	case o.server != "self" && o.server != "external":
		log.Fatal("-server must be self or external")
	case o.server == "external" && (o.url == "" || o.keys == "" || o.pid <= 0):
		log.Fatal("-server external needs -url, -keys and -pid")
	case o.readers < 1 || o.top < 1 || o.top > 10000 || o.rate < 1024 || o.slow <= 0 || o.share <= 0 || o.share >= 1:
		log.Fatal("-readers >= 1, 1 <= -top <= 10000, -rate >= 1024, -slow positive, 0 < -allow-share < 1")
	case o.server == "self" && o.rows < o.top:
		log.Fatal("-rows must be at least -top")
	}
	harness.Verdict(run(o))
}

// run sizes a page and the idle server, lets slow readers crawl through
// their pages while sampling the server's memory, then judges the growth
// and the pages.
func run(o options) ([]string, error) {
	root, keys, pid, stop, err := server(o)
	if err != nil {
		return nil, err
	}
	defer stop()
	if len(keys) < o.readers {
		return nil, fmt.Errorf("%d keys for %d readers: each reader needs its own key", len(keys), o.readers)
	}
	u, err := url.Parse(root + "/Records")
	if err != nil {
		return nil, err
	}
	u.RawQuery = fmt.Sprintf("%%24top=%d", o.top)
	page := u.String()

	// 1. Size and baseline.
	sizing := read(page, keys[0], nil)
	if sizing.err != nil {
		return nil, fmt.Errorf("sizing read: %w", sizing.err)
	}
	log.Printf("one page: %d rows, %.1f MiB, read at full speed in %s", sizing.rows, float64(sizing.bytes)/(1<<20), sizing.took.Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	baseline, err := idleRSS(pid)
	if err != nil {
		return nil, err
	}
	log.Printf("idle server RSS %.1f MiB", baseline/(1<<20))

	// 2. Crawl.
	c, err := crawl(o, page, keys, pid)
	if err != nil {
		return nil, err
	}

	// 3. Verdicts.
	broken := checkMemory(o, sizing, baseline, c)
	for i, r := range c.results {
		switch {
		case r.err != nil:
			broken = append(broken, fmt.Sprintf("reader %d: %v", i, r.err))
		case r.rows != sizing.rows || r.bytes != sizing.bytes:
			broken = append(broken, fmt.Sprintf("reader %d: %d rows, %d bytes; the full-speed read had %d rows, %d bytes", i, r.rows, r.bytes, sizing.rows, sizing.bytes))
		}
	}
	if len(broken) == 0 {
		log.Printf("all %d pages arrived whole (%d rows each)", o.readers, sizing.rows)
	}
	return broken, nil
}

// server is the OData API under test: one started here (-server self),
// whose stop ends it, or the one at -url with -keys and -pid.
func server(o options) (root string, keys []string, pid int, stop func(), err error) {
	if o.server != "self" {
		for _, k := range strings.Split(o.keys, ",") {
			if k = strings.TrimSpace(k); k != "" {
				keys = append(keys, k)
			}
		}
		return strings.TrimRight(o.url, "/"), keys, o.pid, func() {}, nil
	}
	log.Printf("server: sluice odata in its own process; generating %d rows", o.rows)
	// The readers hold their pages (and connections) at once on purpose:
	// the data query cap must not refuse any of them.
	srv, err := odataserver.Start(o.bin, o.rows, o.readers+1, 0, "-max-queries", fmt.Sprint(o.readers+1))
	if err != nil {
		return "", nil, 0, nil, err
	}
	return srv.Root, srv.Keys, srv.PID, srv.Stop, nil
}

// idleRSS is the median of five samples of the server's resident memory.
func idleRSS(pid int) (float64, error) {
	var idle []float64
	for range 5 {
		rss, err := testenv.RSS(pid)
		if err != nil {
			return 0, err
		}
		idle = append(idle, float64(rss))
		time.Sleep(200 * time.Millisecond)
	}
	return harness.Median(idle), nil
}

// crawled is what the crawl saw: each reader's page, and the server's
// memory sampled twice a second.
type crawled struct {
	results []result
	samples []float64
	peak    float64
}

// crawl has o.readers readers (keys after the first) read the page at
// o.rate for o.slow, sampling the server's memory, then lets them finish
// at full speed.
func crawl(o options, page string, keys []string, pid int) (crawled, error) {
	fast := make(chan struct{})
	c := crawled{results: make([]result, o.readers)}
	var wg sync.WaitGroup
	for i := range o.readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.results[i] = read(page, keys[i+1], &throttle{rate: o.rate, fast: fast})
		}()
	}
	// However the sampling ends, the readers are let go and waited for.
	defer wg.Wait()
	defer close(fast)
	start := time.Now()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for time.Since(start) < o.slow {
		<-tick.C
		rss, err := testenv.RSS(pid)
		if err != nil {
			return c, fmt.Errorf("server RSS: %w (did it die?)", err)
		}
		c.samples = append(c.samples, float64(rss))
		c.peak = max(c.peak, float64(rss))
		if len(c.samples)%10 == 0 {
			log.Printf("+%2.0fs server RSS %.1f MiB", time.Since(start).Seconds(), float64(rss)/(1<<20))
		}
	}
	return c, nil
}

// checkMemory judges the server's memory during the crawl: its rise over
// idle must stay within -share of what buffering the pages would cost, and
// it must stop growing.
func checkMemory(o options, sizing result, baseline float64, c crawled) []string {
	var broken []string
	growth := c.peak - baseline
	held := float64(o.readers) * float64(sizing.bytes)
	allowed := o.share * held
	log.Printf("crawl: %d readers × %.1f MiB pages for %s; peak RSS %.1f MiB, %+.1f MiB over idle = %.1f MiB a reader, %.0f%% of a page (allowed %.1f MiB = %.0f%% of the %.0f MiB buffering the pages would cost)",
		o.readers, float64(sizing.bytes)/(1<<20), o.slow, c.peak/(1<<20), growth/(1<<20), growth/float64(o.readers)/(1<<20),
		100*growth/held, allowed/(1<<20), 100*o.share, held/(1<<20))
	if growth > allowed {
		broken = append(broken, fmt.Sprintf("server RSS rose %.1f MiB over idle while readers crawled (allowed %.1f MiB)", growth/(1<<20), allowed/(1<<20)))
	}
	rule := harness.GrowthRule{Relative: 0.05, Absolute: 8 << 20, MinSamples: 6}
	if g := rule.Check(c.samples); !g.Judged {
		broken = append(broken, fmt.Sprintf("only %d RSS samples in the slow phase; raise -slow", len(c.samples)))
	} else if g.Grew {
		broken = append(broken, fmt.Sprintf("server RSS kept growing while readers crawled: last-third median %.1f MiB > %.1f MiB (first-third median %.1f MiB)",
			g.LastMedian/(1<<20), g.Limit/(1<<20), g.FirstMedian/(1<<20)))
	}
	return broken
}

// throttle paces a reader's body reads at rate bytes/s until fast closes.
type throttle struct {
	rate int
	fast <-chan struct{}
}

type result struct {
	rows  int
	bytes int64
	took  time.Duration
	err   error
}

// read fetches one page over a connection with a small receive buffer and
// decodes it as a stream, so nothing but the decoder's window is held.
func read(page, key string, th *throttle) result {
	start := time.Now()
	u, err := url.Parse(page)
	if err != nil {
		return result{err: err}
	}
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10)
		}); err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", u.Host)
	if err != nil {
		return result{err: err}
	}
	defer conn.Close()
	// A generous bound on the whole exchange: the crawl plus a full read.
	_ = conn.SetDeadline(time.Now().Add(10 * time.Minute))
	req, err := http.NewRequest(http.MethodGet, page, nil)
	if err != nil {
		return result{err: err}
	}
	req.Header.Set("x-api-key", key)
	req.Header.Set("Accept-Encoding", "identity")
	req.Close = true
	if err := req.Write(conn); err != nil {
		return result{err: err}
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4<<10), req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return result{err: fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)}
	}
	counted := &countingReader{r: resp.Body}
	var body io.Reader = counted
	if th != nil {
		body = &pacedReader{r: counted, th: th, start: time.Now()}
	}
	rows, err := harness.DecodePage(body)
	return result{rows: rows, bytes: counted.n, took: time.Since(start), err: err}
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// pacedReader hands out at most 1 KiB a read and sleeps to stay at the
// throttle's rate, until the throttle turns fast.
type pacedReader struct {
	r     io.Reader
	th    *throttle
	start time.Time
	n     int64
}

func (p *pacedReader) Read(b []byte) (int, error) {
	select {
	case <-p.th.fast:
		return p.r.Read(b)
	default:
	}
	if len(b) > 1024 {
		b = b[:1024]
	}
	due := p.start.Add(time.Duration(float64(p.n) / float64(p.th.rate) * float64(time.Second)))
	if wait := time.Until(due); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-p.th.fast:
			t.Stop()
		}
	}
	n, err := p.r.Read(b)
	p.n += int64(n)
	return n, err
}
