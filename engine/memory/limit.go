package memory

import (
	"math"
	"runtime/debug"
	"runtime/metrics"
)

// limitHeadroom is the share of the cap the Go runtime may hold above the
// process's memory at start. The counters' own bytes (see cost) stay within
// the cap; without a limit the collector lets the heap grow to twice what is
// live before it runs, so a full cap would cost up to twice its size.
const limitHeadroom = 1.25

// LimitProcess sets the Go runtime's soft memory limit (what GOMEMLIMIT
// sets) to the memory the process holds now plus 1.25 × maxBytes, so that
// counters filling their Budget leave the process's resident memory within
// 1.5 × maxBytes of its idle size. It does nothing when a limit is already
// set (GOMEMLIMIT, or another caller). stop restores the previous limit.
// The limit is soft: a live heap above it is collected more often, never
// refused (the runtime caps the collector's share of CPU).
func LimitProcess(maxBytes int64) (stop func()) {
	prev := debug.SetMemoryLimit(-1)
	if prev != math.MaxInt64 || maxBytes <= 0 {
		return func() {}
	}
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	var held int64
	if s[0].Value.Kind() == metrics.KindUint64 && s[1].Value.Kind() == metrics.KindUint64 {
		held = int64(s[0].Value.Uint64() - s[1].Value.Uint64())
	}
	debug.SetMemoryLimit(held + int64(float64(maxBytes)*limitHeadroom))
	return func() { debug.SetMemoryLimit(prev) }
}
