package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// basePercent is the GC percentage used once the live heap reaches half
// the floor: Go's default.
const basePercent = 100

// heapMinimum is the runtime's smallest heap goal at GOGC=100; it scales
// with the percentage (4 MiB × GOGC/100), so the percentage must stay at or
// below floor/heapMinimum or the goal of a small heap would overshoot the
// floor.
const heapMinimum = 4 << 20

// Percent is the GC percentage that puts the next collection at
// max(floor, 2 × live): floor/live − 1 in percent, never below basePercent
// and never above what keeps the runtime's minimum heap within the floor.
func Percent(live, floor uint64) int {
	if floor == 0 || live >= floor/2 {
		return basePercent
	}
	most := max(floor*100/heapMinimum, basePercent)
	if live == 0 {
		return int(most)
	}
	return int(min(floor*100/live-100, most))
}

var (
	mu      sync.Mutex
	active  *state
	initial int // the percentage before the first Start, restored by the last stop
)

type state struct {
	floor   uint64
	users   int
	percent int
	sample  []metrics.Sample
}

// sentinel is garbage whose finalizer runs after the collection that finds
// it unreachable. It holds a pointer so that it is not a tiny allocation
// (those share a block and may never be finalized).
type sentinel struct{ s *state }

// Start keeps the next collection from starting below floor bytes until
// the returned stop is called. Several Starts share one setting (the
// largest floor wins); the last stop restores the GC percentage found at
// the first Start. A floor of 0 changes nothing.
func Start(floor uint64) (stop func()) {
	if floor == 0 {
		return func() {}
	}
	mu.Lock()
	defer mu.Unlock()
	if active == nil {
		initial = gcPercent()
		active = &state{floor: floor, percent: initial,
			sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
		arm(active)
	}
	s := active
	s.floor = max(s.floor, floor)
	s.users++
	adjustLocked(s)
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			defer mu.Unlock()
			s.users--
			if s.users == 0 && active == s {
				active = nil // the armed finalizer sees it and stops
				debug.SetGCPercent(initial)
			}
		})
	}
}

// Floor is the floor in force (0 when none).
func Floor() uint64 {
	mu.Lock()
	defer mu.Unlock()
	if active == nil {
		return 0
	}
	return active.floor
}

// gcPercent is the GC percentage in force (GOGC; -1 when off).
func gcPercent() int {
	sample := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return basePercent // unknown to this runtime: Go's default
	}
	// GOGC=off reads as the two's complement of -1, SetGCPercent's value.
	return int(int64(sample[0].Value.Uint64()))
}

func arm(s *state) {
	runtime.SetFinalizer(&sentinel{s: s}, func(x *sentinel) {
		mu.Lock()
		defer mu.Unlock()
		if active != x.s {
			return // stopped
		}
		adjustLocked(x.s)
		arm(x.s)
	})
}

// adjustLocked sets the percentage from the live heap of the last
// collection, when it differs by more than a tenth (each change recomputes
// the pacer; small drifts are not worth it).
func adjustLocked(s *state) {
	metrics.Read(s.sample)
	if s.sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	p := Percent(s.sample[0].Value.Uint64(), s.floor)
	if d := p - s.percent; d*10 > s.percent || -d*10 > s.percent {
		debug.SetGCPercent(p)
		s.percent = p
	}
}
