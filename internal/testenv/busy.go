package testenv

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// BusyCPUs keeps the CPUs busy with 2 × NumCPU spinning goroutines until
// the test ends, the way a loaded CI machine keeps a test's goroutines
// waiting for a core: a test meant to hold on a slow machine runs beside
// them.
func BusyCPUs(t testing.TB) {
	t.Helper()
	var stop atomic.Bool
	var spin sync.WaitGroup
	for range 2 * runtime.NumCPU() {
		spin.Add(1)
		go func() {
			defer spin.Done()
			for x := 0; !stop.Load(); x++ {
				if x%1_000_000 == 0 {
					runtime.Gosched()
				}
			}
		}()
	}
	t.Cleanup(func() { stop.Store(true); spin.Wait() })
}
