package quota_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine/alloc"

	"github.com/sluicehq/sluice/quota"
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
		f := newFixture(b, quota.DefaultOptions(), rules1000, true)
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

func (discard) Push([]quota.Action) {}

// BenchmarkFleetReports is make bench's RLQS fleet in process on a manual
// clock: 50 Envoys reporting the same 1,000 buckets every 5 s, spread over
// the period, demands uneven; ns/op is per bucket report.
func BenchmarkFleetReports(b *testing.B) {
	const envoys, buckets = 50, 1000
	o := quota.DefaultOptions()
	plans, changes := 0, 0
	o.Observe = func(_ string, _ *alloc.Input, out *alloc.Output) { plans++; changes += len(out.Changes) }
	f := newFixture(b, o, rules1000, true)
	streams := make([]*quota.Stream, envoys)
	for i := range streams {
		streams[i] = f.svc.Open(discard{})
	}
	now := f.clock.Now()
	report := func(e int, elapsed time.Duration) {
		u := users(0, buckets, elapsed)
		for k := range u {
			u[k].Allowed = uint64((e%5 + 1) * (k%7 + 1) * 3)
		}
		if err := streams[e].Report(now, "q", u); err != nil {
			b.Fatal(err)
		}
	}
	step := 5 * time.Second / envoys
	for e := range envoys {
		report(e, 0)
		now = now.Add(step)
		f.clock.Set(now)
		f.svc.Advance(now)
	}
	// Two report periods settle the division, as make bench's warm
	// interval does: what is measured is a fleet reporting steadily.
	for e := range 2 * envoys {
		now = now.Add(step)
		f.clock.Set(now)
		f.svc.Advance(now)
		report(e%envoys, 5*time.Second)
	}
	b.ResetTimer()
	plans, changes = 0, 0
	defer func() {
		b.ReportMetric(float64(plans)*1000/float64(b.N), "plans/1k-reports")
		b.ReportMetric(float64(changes)*1000/float64(b.N), "actions/1k-reports")
	}()
	for n := 0; n < b.N; n += buckets {
		e := (n / buckets) % envoys
		now = now.Add(step)
		f.clock.Set(now)
		f.svc.Advance(now)
		report(e, 5*time.Second)
	}
}
