package rlqs_test

import (
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors/rlqs"
	"github.com/sluicehq/sluice/engine/memory"
	alloc "github.com/sluicehq/sluice/engine/rlqs"
	"github.com/sluicehq/sluice/engine/stats"
)

// The fleet of the benchmark: benchEnvoys streams, each reporting the same
// benchBuckets buckets in one message per reporting interval.
const (
	benchEnvoys   = 50
	benchBuckets  = 1000
	benchInterval = time.Second
)

// benchClock is the time of the service, the store and the reports: a
// benchmark runs ticks and reports in the order a second of traffic would
// bring them, as fast as they go.
type benchClock struct{ ns atomic.Int64 }

func (c *benchClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }
func (c *benchClock) now() time.Time  { return time.Unix(0, c.ns.Load()) }

// benchEnvoy is one Envoy of the fleet: its stream, its buckets' demand,
// and the rate it was last assigned per bucket (it admits up to that).
type benchEnvoy struct {
	stream  *rlqs.Stream
	usages  []rlqs.Usage
	demand  []float64 // requests per second, per bucket
	rate    []float64 // assigned, per bucket; negative: none (allow all)
	index   map[string]int
	actions int
}

// Push records the assigned rates; the service calls it from Tick, on the
// benchmark's goroutine.
func (e *benchEnvoy) Push(acts []rlqs.Action) {
	for _, a := range acts {
		i, ok := e.index[a.Key]
		if !ok {
			continue
		}
		e.actions++
		switch {
		case a.Abandon:
			e.rate[i] = -1
		case a.Strategy.Kind == alloc.TokenBucket:
			e.rate[i] = a.Strategy.Rate()
		case a.Strategy.Kind == alloc.DenyAll:
			e.rate[i] = 0
		default:
			e.rate[i] = -1
		}
	}
}

// fill sets the usages of one interval: what the Envoy's demand was, and
// what of it its assignment let through.
func (e *benchEnvoy) fill(first bool) {
	for k := range e.usages {
		u := &e.usages[k]
		if first {
			// The subscription: the first request into the bucket.
			u.Elapsed, u.Allowed, u.Denied = 0, 1, 0
			continue
		}
		want := e.demand[k] * benchInterval.Seconds()
		ok := want
		if r := e.rate[k]; r >= 0 {
			ok = min(want, r*benchInterval.Seconds())
		}
		u.Elapsed = benchInterval
		u.Allowed = uint64(math.Round(ok))
		u.Denied = uint64(math.Round(want)) - min(uint64(math.Round(want)), u.Allowed)
	}
}

// benchFleet drives one replica's quota service by hand.
type benchFleet struct {
	q        *rlqs.Service
	stats    *stats.Store
	clock    *benchClock
	envoys   []*benchEnvoy
	tickAt   time.Time // the next tick
	start    time.Time // the current interval's
	tick     time.Duration
	reported int
}

// newBenchFleet opens the streams; nothing is reported yet. A tenth of the
// users ask twice the limit (1000/s) in all, the others 100–400/s; of a
// user's demand, Envoy i has 1 + i%5 parts of 150, so the shares differ.
func newBenchFleet(b *testing.B) *benchFleet {
	clock := &benchClock{}
	t0 := time.Unix(1_700_000_000, 0)
	clock.set(t0)
	o := rlqs.DefaultOptions()
	r := newReplicaWith(b, memory.New(clock.now), rules, o, rlqs.NewManual)
	buckets := make([]map[string]string, benchBuckets)
	index := make(map[string]int, benchBuckets)
	total := make([]float64, benchBuckets)
	for k := range buckets {
		buckets[k] = bucket(fmt.Sprintf("u%d", k))
		index["q\x00"+alloc.Key(buckets[k])] = k
		total[k] = 100 + float64(k%7)*50
		if k%10 == 0 {
			total[k] = 2000
		}
	}
	weights := 0.0
	for i := range benchEnvoys {
		weights += float64(1 + i%5)
	}
	f := &benchFleet{q: r.quota, stats: r.stats, clock: clock, tickAt: t0, start: t0, tick: o.Tick}
	for i := range benchEnvoys {
		e := &benchEnvoy{usages: make([]rlqs.Usage, benchBuckets), demand: make([]float64, benchBuckets),
			rate: make([]float64, benchBuckets), index: index}
		for k := range e.usages {
			e.usages[k].Bucket = buckets[k]
			e.demand[k] = total[k] * float64(1+i%5) / weights
			e.rate[k] = -1
		}
		e.stream = r.quota.Open(e)
		b.Cleanup(e.stream.Close)
		f.envoys = append(f.envoys, e)
	}
	return f
}

// ticksUntil runs the ticks due before t.
func (f *benchFleet) ticksUntil(t time.Time) {
	for f.tickAt.Before(t) {
		f.clock.set(f.tickAt)
		f.q.Tick(f.tickAt)
		f.tickAt = f.tickAt.Add(f.tick)
	}
}

// interval plays one reporting interval: each Envoy reports every bucket
// once, the Envoys spread evenly over it (independent proxies are not in
// step), with the service's ticks in between.
func (f *benchFleet) interval(b *testing.B, first bool) {
	for i, e := range f.envoys {
		at := f.start.Add(benchInterval * time.Duration(i) / benchEnvoys)
		f.ticksUntil(at)
		f.clock.set(at)
		e.fill(first)
		if err := e.stream.Report(at, "q", e.usages); err != nil {
			b.Fatal(err)
		}
		f.reported += len(e.usages)
	}
	f.start = f.start.Add(benchInterval)
	f.ticksUntil(f.start)
}

// cpuTime is the CPU time the process has used (user and system, every
// thread: the garbage collector's work the reports cause is theirs).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapLive is the heap in use by reachable objects.
func heapLive() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkReports: 50 Envoys report the same 1,000 buckets every second;
// an op is one reporting interval of the fleet (50,000 bucket reports and
// the 20 ticks of the service that serve them: division, reservation on
// the memory store, actions). cpu-ns/1k-reports is the process's CPU time
// per 1,000 bucket reports; heap-B/entry is the live heap the hubs take
// per reporter (bucket × Envoy) once they exist, and heap-B/entry-end the
// same after the measured intervals: equal when nothing grows with time.
func BenchmarkReports(b *testing.B) {
	f := newBenchFleet(b)
	base := heapLive()
	f.interval(b, true)
	for range 3 { // the shares settle
		f.interval(b, false)
	}
	entries := float64(benchEnvoys * benchBuckets)
	warm := heapLive()
	b.ReportAllocs()
	b.ResetTimer()
	reported, actions := f.reported, f.actions()
	replaced := f.stats.CounterValue("ratelimit.rlqs.assignments")
	c0 := cpuTime(b)
	for range b.N {
		f.interval(b, false)
	}
	cpu := cpuTime(b) - c0
	b.StopTimer()
	end := heapLive()
	k := float64(f.reported-reported) / 1000
	b.ReportMetric(float64(cpu.Nanoseconds())/k, "cpu-ns/1k-reports")
	b.ReportMetric(float64(f.actions()-actions)/k, "actions/1k-reports")
	b.ReportMetric(float64(f.stats.CounterValue("ratelimit.rlqs.assignments")-replaced)/k, "new-assignments/1k-reports")
	b.ReportMetric((float64(warm)-float64(base))/entries, "heap-B/entry")
	b.ReportMetric((float64(end)-float64(base))/entries, "heap-B/entry-end")
}

func (f *benchFleet) actions() int {
	n := 0
	for _, e := range f.envoys {
		n += e.actions
	}
	return n
}
