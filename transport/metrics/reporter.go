package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/internal/netx"
	"github.com/sluicehq/sluice/internal/tick"
)

// Options are what a Reporter needs besides its settings.
type Options struct {
	Logger *slog.Logger
	// Stdout receives the standard-output sink's lines; os.Stdout when nil.
	Stdout io.Writer
	// Clock stamps the standard-output sink's lines; time.Now when nil.
	Clock func() time.Time
	// HTTPServer builds the pull metrics server (with the service's listener
	// timeouts); a server with a 10 s header timeout when nil.
	HTTPServer func(http.Handler) *http.Server
	// Refresh, when set, runs at the start of every flush (the timer's, a
	// scrape's, the final one) to set gauges whose value is read from
	// elsewhere (shard queue depth) rather than kept current on the hot path.
	Refresh func()
	// Collectors are served by the pull metrics sink beside the
	// statistics, so one scrape has both (the OData API's metrics); the
	// other sinks ignore them.
	Collectors []prometheus.Collector
}

// sample is one statistic as a sink sees it at a flush.
type sample struct {
	name    string
	kind    stats.Kind
	delta   uint64    // counters: the change since the previous flush (never 0)
	gauge   int64     // gauges: the value
	changed bool      // gauges: the value differs from the previous flush's
	timings []float64 // timers: milliseconds recorded since the previous flush
}

// sink is one destination. Its methods run on the Reporter's flush goroutine
// (or under its lock), one at a time.
type sink interface {
	send(batch []sample)
	close() error
}

// Reporter flushes a stats.Store to the configured sink.
type Reporter struct {
	s       Settings
	store   *stats.Store
	log     *slog.Logger
	refresh func()
	sink    sink
	pull    *pullSink // also sink, when the pull sink is chosen

	mu       sync.Mutex // one flush at a time; guards the last-seen values
	counters map[string]uint64
	gauges   map[string]int64

	stop      chan struct{}
	done      chan struct{}
	started   bool
	closed    bool
	httpSrv   *http.Server
	newServer func(http.Handler) *http.Server
	served    chan struct{} // closed when the pull metrics server's goroutine returns
	ln        net.Listener
}

// New builds the sink the settings choose. It opens nothing yet: Start does.
func New(s Settings, store *stats.Store, o Options) (*Reporter, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.HTTPServer == nil {
		o.HTTPServer = func(h http.Handler) *http.Server {
			return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		}
	}
	r := &Reporter{s: s, store: store, log: o.Logger, newServer: o.HTTPServer, refresh: o.Refresh, counters: map[string]uint64{}, gauges: map[string]int64{},
		stop: make(chan struct{}), done: make(chan struct{})}
	addr := net.JoinHostPort(s.StatsdHost, fmt.Sprint(s.StatsdPort))
	switch {
	case s.Disabled:
		r.sink = nopSink{}
	case s.UseStatsd:
		r.sink = newStatsdSink(addr, s.ExtraTags, o.Logger)
	case s.UseTagged:
		ts, err := newTaggedSink(addr, s.ExtraTags, s.Mogrifiers, o.Logger)
		if err != nil {
			return nil, err
		}
		r.sink = ts
	case s.UsePull:
		ps, err := newPullSink(s, o.Logger)
		if err != nil {
			return nil, err
		}
		for _, c := range o.Collectors {
			if err := ps.reg.Register(c); err != nil {
				ps.close()
				return nil, fmt.Errorf("pull metrics: %w", err)
			}
		}
		r.sink, r.pull = ps, ps
	case o.Stdout == io.Discard:
		r.sink = nopSink{} // nothing to format lines for
	default:
		r.sink = newLogSink(o.Stdout, s.ExtraTags, o.Clock)
	}
	return r, nil
}

// Sink names the chosen sink: statsd, tagged statsd, pull metrics, stdout or none.
func (r *Reporter) Sink() string { return r.s.sinkName() }

// Start opens the pull metrics listener (when that sink is chosen) and starts
// the flush goroutine. Close stops both.
func (r *Reporter) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started || r.closed {
		return errors.New("metrics: reporter already started or closed")
	}
	if r.pull != nil {
		raw, err := net.Listen("tcp", r.s.PullAddr)
		if err != nil {
			return fmt.Errorf("pull metrics: listening on %s: %w", r.s.PullAddr, err)
		}
		// As every other port: accept failures (out of file descriptors)
		// waited out, connections beyond the cap refused with a 503.
		ln, err := netx.Listen(raw, netx.Config{Max: r.s.pullCap(), Refuse: netx.RefuseHTTP, Name: "metrics", Log: r.log})
		if err != nil {
			raw.Close()
			return fmt.Errorf("pull metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle(r.s.PullPath, r.pull.handler(r.Flush))
		r.ln = ln
		r.httpSrv = r.newServer(mux)
		r.served = make(chan struct{})
		go func() {
			defer close(r.served)
			if err := r.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				r.log.Error("pull metrics server stopped", "error", err)
			}
		}()
		r.log.Info("Starting pull metrics sink on " + ln.Addr().String() + r.s.PullPath)
	}
	r.started = true
	if !r.s.Disabled {
		r.log.Info("Stats initialized for " + r.Sink())
	}
	go r.loop()
	return nil
}

// Addr is the pull metrics listener's address, or nil.
func (r *Reporter) Addr() net.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln == nil {
		return nil
	}
	return r.ln.Addr()
}

func (r *Reporter) loop() {
	defer close(r.done)
	every := r.s.FlushInterval
	if every <= 0 { // DISABLE_STATS: nothing is sent, but released values still go
		every = 10 * time.Second
	}
	tick.Every(r.stop, every, r.Flush)
}

// Flush sends what changed since the previous flush now. Then the store
// drops the values it released (removed rules, idle request-named ones),
// whose last change this flush has just sent.
func (r *Reporter) Flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if !r.s.Disabled {
		if batch := r.collect(); len(batch) > 0 {
			r.sink.send(batch)
		}
	}
	for _, name := range r.store.Sweep() {
		delete(r.counters, name)
		delete(r.gauges, name)
	}
}

// collect reads what a flush sends, after the store's collectors
// (stats.Store.OnCollect: runtime, pool and local cache figures) and Refresh
// have set the gauges they own; every flush, the final one included, comes
// through here.
func (r *Reporter) collect() []sample {
	r.store.Collect()
	if r.refresh != nil {
		r.refresh()
	}
	var out []sample
	r.store.Each(func(v stats.Value) {
		switch v.Kind {
		case stats.KindCounter:
			cur := v.Counter.Value()
			if prev := r.counters[v.Name]; cur != prev {
				r.counters[v.Name] = cur
				out = append(out, sample{name: v.Name, kind: v.Kind, delta: cur - prev})
			}
		case stats.KindGauge:
			cur := v.Gauge.Value()
			prev, seen := r.gauges[v.Name]
			r.gauges[v.Name] = cur
			out = append(out, sample{name: v.Name, kind: v.Kind, gauge: cur, changed: !seen || prev != cur})
		case stats.KindTimer:
			if ms := v.Timer.Drain(); len(ms) > 0 {
				out = append(out, sample{name: v.Name, kind: v.Kind, timings: ms})
			}
		}
	})
	return out
}

// Close stops the flush goroutine and the pull metrics server, sends a final
// flush, and closes the sink. It is safe to call more than once.
func (r *Reporter) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true // from here on, Flush (a scrape, the ticker) does nothing
	started := r.started
	r.mu.Unlock()
	if started {
		close(r.stop)
		<-r.done
	}
	var errs []error
	if r.httpSrv != nil {
		// Without the lock: a scrape in progress may be waiting for it.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.httpSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("pull metrics server: %w", err))
		}
		<-r.served
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.s.Disabled {
		if batch := r.collect(); len(batch) > 0 {
			r.sink.send(batch)
		}
	}
	errs = append(errs, r.sink.close())
	return errors.Join(errs...)
}

type nopSink struct{}

func (nopSink) send([]sample) {}
func (nopSink) close() error  { return nil }

// sortedTags are tags in key order, values cleaned as gostats does (no '.',
// ':' or '|', which would break a statsd line), empty keys or values dropped.
func sortedTags(tags map[string]string) [][2]string {
	out := make([][2]string, 0, len(tags))
	for k, v := range tags {
		if k != "" && v != "" {
			out = append(out, [2]string{k, cleanTagValue(v)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

var tagValueCleaner = strings.NewReplacer(".", "_", ":", "_", "|", "_")

func cleanTagValue(v string) string { return tagValueCleaner.Replace(v) }

// serializedTags is the suffix gostats appends to a name to carry its tags in
// plain statsd: ".__k1=v1.__k2=v2", keys sorted.
func serializedTags(tags map[string]string) string {
	var b strings.Builder
	for _, t := range sortedTags(tags) {
		b.WriteString(".__")
		b.WriteString(t[0])
		b.WriteByte('=')
		b.WriteString(t[1])
	}
	return b.String()
}

// Short names for the kinds, as the sinks switch on them.
const (
	kindCounter = stats.KindCounter
	kindGauge   = stats.KindGauge
	kindTimer   = stats.KindTimer
)
