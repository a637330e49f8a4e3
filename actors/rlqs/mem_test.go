package rlqs_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors/rlqs"
)

// BenchmarkReporterMemory measures the heap one tracked bucket of one
// stream (a reporter, and its bucket's hub when it is the only one) takes:
// what SLUICE_RLQS_MAX_REPORTERS multiplies.
func BenchmarkReporterMemory(b *testing.B) {
	const n = 20_000
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f := newFixture(b, rlqs.DefaultOptions(), rules1000, true)
		now := f.clock.Now()
		for i := range n / 100 {
			st := f.svc.Open(discard{})
			if err := st.Report(now, "q", users(i*100, 100, 0)); err != nil {
				b.Fatal(err)
			}
		}
		f.svc.Advance(now.Add(time.Second))
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/reporter")
		b.ReportMetric(float64(f.counters.Used())/n, "counterB/reporter")
		runtime.KeepAlive(f)
	}
}

type discard struct{}

func (discard) Push([]rlqs.Action) {}
