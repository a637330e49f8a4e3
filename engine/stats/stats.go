package stats

import (
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kind tells a sink how to report a value.
type Kind int

const (
	KindCounter Kind = iota
	KindGauge
	KindTimer
)

// Counter is a monotonically increasing count.
type Counter struct{ v atomic.Uint64 }

func (c *Counter) Add(n uint64) { c.v.Add(n) }
func (c *Counter) Inc()         { c.v.Add(1) }

// Set makes the counter n, for totals kept elsewhere (the Go runtime's, a
// connection pool's) and copied in before a flush; n must not go down.
func (c *Counter) Set(n uint64) { c.v.Store(n) }
func (c *Counter) Value() uint64 {
	return c.v.Load()
}

// Gauge is a value that goes up and down.
type Gauge struct{ v atomic.Int64 }

func (g *Gauge) Set(n int64)  { g.v.Store(n) }
func (g *Gauge) Add(n int64)  { g.v.Add(n) }
func (g *Gauge) Value() int64 { return g.v.Load() }

// Timer accumulates durations between flushes. Sinks drain it with Drain.
type Timer struct {
	mu      sync.Mutex
	samples []float64 // whole milliseconds, as the reference's gostats timers
}

// maxTimerSamples bounds a timer's memory between flushes; later samples are
// dropped rather than growing without limit when no sink drains the timer.
const maxTimerSamples = 1 << 14

// Record adds one sample in whole milliseconds, truncated, as the reference's
// gostats timers do (a 2.9 ms call is sent as "2|ms" in every sink).
func (t *Timer) Record(d time.Duration) {
	ms := float64(d / time.Millisecond)
	t.mu.Lock()
	if len(t.samples) < maxTimerSamples {
		t.samples = append(t.samples, ms)
	}
	t.mu.Unlock()
}

// Drain returns the samples recorded since the last Drain.
func (t *Timer) Drain() []float64 {
	t.mu.Lock()
	s := t.samples
	t.samples = nil
	t.mu.Unlock()
	return s
}

type entry struct {
	kind    Kind
	counter *Counter
	gauge   *Gauge
	timer   *Timer
}

// Store is the registry of every value, keyed by its full dotted name.
// Lookups of existing names take no lock.
type Store struct {
	m sync.Map // name → *entry

	mu         sync.Mutex
	collectors []func()
}

// OnCollect registers fn to refresh values kept elsewhere (runtime and pool
// figures) right before a sink reads the store; see Collect.
func (s *Store) OnCollect(fn func()) {
	s.mu.Lock()
	s.collectors = append(s.collectors, fn)
	s.mu.Unlock()
}

// Collect runs the functions registered with OnCollect. Sinks call it at
// each flush, before Each.
func (s *Store) Collect() {
	s.mu.Lock()
	fns := append([]func(){}, s.collectors...)
	s.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// NewStore returns an empty store.
func NewStore() *Store { return &Store{} }

func (s *Store) get(name string, kind Kind) *entry {
	if e, ok := s.m.Load(name); ok {
		return e.(*entry)
	}
	e := &entry{kind: kind}
	switch kind {
	case KindCounter:
		e.counter = &Counter{}
	case KindGauge:
		e.gauge = &Gauge{}
	case KindTimer:
		e.timer = &Timer{}
	}
	actual, _ := s.m.LoadOrStore(name, e)
	return actual.(*entry)
}

// Counter returns the counter of that name, creating it at zero.
func (s *Store) Counter(name string) *Counter {
	e := s.get(name, KindCounter)
	if e.counter == nil { // name already used by another kind: keep working, count nowhere shared
		return &Counter{}
	}
	return e.counter
}

// Gauge returns the gauge of that name, creating it at zero.
func (s *Store) Gauge(name string) *Gauge {
	e := s.get(name, KindGauge)
	if e.gauge == nil {
		return &Gauge{}
	}
	return e.gauge
}

// Timer returns the timer of that name.
func (s *Store) Timer(name string) *Timer {
	e := s.get(name, KindTimer)
	if e.timer == nil {
		return &Timer{}
	}
	return e.timer
}

// Value is one entry as seen by Each.
type Value struct {
	Name    string
	Kind    Kind
	Counter *Counter
	Gauge   *Gauge
	Timer   *Timer
}

// Each calls fn for every value in name order.
func (s *Store) Each(fn func(Value)) {
	var vals []Value
	s.m.Range(func(k, v any) bool {
		e := v.(*entry)
		vals = append(vals, Value{Name: k.(string), Kind: e.kind, Counter: e.counter, Gauge: e.gauge, Timer: e.timer})
		return true
	})
	sort.Slice(vals, func(i, j int) bool { return vals[i].Name < vals[j].Name })
	for _, v := range vals {
		fn(v)
	}
}

// CounterValue is the current value of a counter, 0 when it does not exist.
// Meant for tests and debug output.
func (s *Store) CounterValue(name string) uint64 {
	if e, ok := s.m.Load(name); ok && e.(*entry).counter != nil {
		return e.(*entry).counter.Value()
	}
	return 0
}

// SanitizeName makes a descriptor-derived key safe as a statsd name the way the
// reference does: ':' and '|' become '_', and so do the dots of anything shaped
// like an IPv4 address (so 10.0.0.1 does not split into four name segments).
func SanitizeName(s string) string {
	if strings.ContainsAny(s, ":|") {
		s = strings.NewReplacer(":", "_", "|", "_").Replace(s)
	}
	if strings.Count(s, ".") < 3 {
		return s
	}
	return ipv4.ReplaceAllStringFunc(s, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}

var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)
