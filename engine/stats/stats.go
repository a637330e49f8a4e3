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
	// dynamic entries were named by a request (DynamicCounter); they count
	// against the store's bound and are released once idle.
	dynamic atomic.Bool
	// retired is the sweep after which the entry is deleted (0: in use).
	retired atomic.Uint64
	// seen is the counter's value at the previous sweep (dynamic entries;
	// read and written only by Sweep).
	seen uint64
}

// Default bounds of the names requests create (DynamicCounter).
const (
	DefaultMaxDynamic         = 20000
	DefaultMaxDynamicNameSize = 256
)

// Store is the registry of every value, keyed by its full dotted name.
// Lookups of existing names take no lock.
//
// Names come from two places. The service and its rules name most values;
// those live until Release (a rule removed by a reload). Requests name the
// others (an unknown domain's domain_not_found, detailed_metric keys): those
// are bounded in number and length (SetDynamicLimit), further ones count
// under an overflow name, and one idle for a whole sweep interval is
// released. A released value is deleted by the second Sweep after, so a
// sink that reads values just before each Sweep reports its last change.
type Store struct {
	m sync.Map // name → *entry

	maxDynamic, maxNameSize int64
	dynamic                 atomic.Int64 // live dynamic entries

	sweepMu sync.Mutex
	sweeps  atomic.Uint64

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

// NewStore returns an empty store with the default bounds.
func NewStore() *Store {
	return &Store{maxDynamic: DefaultMaxDynamic, maxNameSize: DefaultMaxDynamicNameSize}
}

// SetDynamicLimit bounds the names requests create: at most names of them,
// each at most nameSize bytes. Call it before the store is shared.
func (s *Store) SetDynamicLimit(names, nameSize int) {
	s.maxDynamic, s.maxNameSize = int64(names), int64(nameSize)
}

func (s *Store) get(name string, kind Kind) *entry {
	if e, ok := s.m.Load(name); ok {
		e := e.(*entry)
		if e.retired.Load() != 0 {
			e.retired.Store(0) // named again (a rule back after a reload): keep it
		}
		if e.dynamic.Load() && e.dynamic.CompareAndSwap(true, false) {
			s.dynamic.Add(-1) // a rule now owns it: no longer released when idle
		}
		return e
	}
	actual, _ := s.m.LoadOrStore(name, newEntry(kind))
	return actual.(*entry)
}

func newEntry(kind Kind) *entry {
	e := &entry{kind: kind}
	switch kind {
	case KindCounter:
		e.counter = &Counter{}
	case KindGauge:
		e.gauge = &Gauge{}
	case KindTimer:
		e.timer = &Timer{}
	}
	return e
}

// DynamicCounter is the counter of a name a request made up. Past the
// store's bounds (too many such names, or this one too long) it is the
// counter named overflow instead, which lives as long as the store.
func (s *Store) DynamicCounter(name, overflow string) *Counter {
	if e, ok := s.m.Load(name); ok {
		e := e.(*entry)
		if e.retired.Load() != 0 {
			e.retired.Store(0) // busy again before its deletion
		}
		if e.counter != nil {
			return e.counter
		}
		return &Counter{}
	}
	if int64(len(name)) > s.maxNameSize || s.dynamic.Load() >= s.maxDynamic {
		return s.Counter(overflow)
	}
	e := newEntry(KindCounter)
	e.dynamic.Store(true)
	actual, loaded := s.m.LoadOrStore(name, e)
	if !loaded {
		s.dynamic.Add(1)
	}
	if c := actual.(*entry).counter; c != nil {
		return c
	}
	return &Counter{}
}

// DynamicNames is how many names requests have created and the store holds.
func (s *Store) DynamicNames() int { return int(s.dynamic.Load()) }

// Release marks names as no longer used (the stats of a removed rule). They
// are deleted by the second Sweep from now unless named again before.
func (s *Store) Release(names ...string) {
	next := s.sweeps.Load() + 1
	for _, n := range names {
		if e, ok := s.m.Load(n); ok {
			e.(*entry).retired.Store(next)
		}
	}
}

// Sweep deletes the values released before the previous Sweep and marks
// request-named counters unchanged since then as released. It returns the
// deleted names, so that a sink can forget what it remembered of them. A
// statistics sink calls it right after reading the values, at every flush.
func (s *Store) Sweep() []string {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	n := s.sweeps.Add(1)
	var deleted []string
	s.m.Range(func(k, v any) bool {
		e := v.(*entry)
		if r := e.retired.Load(); r != 0 && r < n {
			s.m.Delete(k)
			if e.dynamic.Load() {
				s.dynamic.Add(-1)
			}
			deleted = append(deleted, k.(string))
			return true
		}
		if e.dynamic.Load() && e.counter != nil {
			if v := e.counter.Value(); v == e.seen {
				e.retired.CompareAndSwap(0, n)
			} else {
				e.seen = v
			}
		}
		return true
	})
	return deleted
}

// Len is the number of values the store holds.
func (s *Store) Len() int {
	n := 0
	s.m.Range(func(any, any) bool { n++; return true })
	return n
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
