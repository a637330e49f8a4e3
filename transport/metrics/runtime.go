package metrics

import (
	"runtime"

	"github.com/sluicehq/sluice/engine/stats"
)

// RegisterRuntime adds the reference's Go runtime statistics (gostats'
// runtime generator under the "ratelimit.go" scope) to st, refreshed at each
// flush. Names, kinds and units are gostats': byte and object figures are
// gauges, running totals are counters (sent as their change since the last
// flush), lastGC is nanoseconds since 1970 and gcCPUPercent a whole percent.
// As in gostats, sys is registered but never set, and lookups is never sent.
func RegisterRuntime(st *stats.Store) {
	p := "ratelimit.go."
	g := func(n string) *stats.Gauge { return st.Gauge(p + n) }
	c := func(n string) *stats.Counter { return st.Counter(p + n) }
	alloc := g("alloc")
	g("sys") // registered and never set, as in gostats
	totalAlloc, mallocs, frees := c("totalAlloc"), c("mallocs"), c("frees")
	heapAlloc, heapSys, heapIdle, heapInuse, heapReleased, heapObjects := g("heapAlloc"), g("heapSys"), g("heapIdle"), g("heapInuse"), g("heapReleased"), g("heapObjects")
	nextGC, lastGC, gcCPU, goroutines := g("nextGC"), g("lastGC"), g("gcCPUPercent"), g("numGoroutine")
	pauseTotal, numGC := c("pauseTotalNs"), c("numGC")
	st.OnCollect(func() {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		alloc.Set(int64(m.Alloc))
		totalAlloc.Set(m.TotalAlloc)
		mallocs.Set(m.Mallocs)
		frees.Set(m.Frees)
		heapAlloc.Set(int64(m.HeapAlloc))
		heapSys.Set(int64(m.HeapSys))
		heapIdle.Set(int64(m.HeapIdle))
		heapInuse.Set(int64(m.HeapInuse))
		heapReleased.Set(int64(m.HeapReleased))
		heapObjects.Set(int64(m.HeapObjects))
		nextGC.Set(int64(m.NextGC))
		lastGC.Set(int64(m.LastGC))
		pauseTotal.Set(m.PauseTotalNs)
		numGC.Set(uint64(m.NumGC))
		gcCPU.Set(int64(m.GCCPUFraction * 100))
		goroutines.Set(int64(runtime.NumGoroutine()))
	})
}

// PoolFigures are a connection pool's totals, read at each flush.
type PoolFigures struct {
	Active      int64 // connections open now
	Opened      int64 // connections opened since start
	LocalCloses int64 // connections this process closed
}

// RegisterPool adds the reference's Redis pool statistics under scope
// ("ratelimit.redis_pool" or "ratelimit.redis_per_second_pool"): cx_active
// (gauge), cx_total and cx_local_close (counters).
func RegisterPool(st *stats.Store, scope string, read func() PoolFigures) {
	active, total, closes := st.Gauge(scope+".cx_active"), st.Counter(scope+".cx_total"), st.Counter(scope+".cx_local_close")
	st.OnCollect(func() {
		f := read()
		active.Set(f.Active)
		total.Set(uint64(max(f.Opened, 0)))
		closes.Set(uint64(max(f.LocalCloses, 0)))
	})
}
