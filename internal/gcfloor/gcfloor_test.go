package gcfloor

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, floor uint64
		want        int
	}{
		{8 * mib, 0, 100},          // no floor
		{8 * mib, 64 * mib, 700},   // next collection at 64 MiB
		{16 * mib, 64 * mib, 300},  // 64 MiB
		{32 * mib, 64 * mib, 100},  // half the floor: 2 × live reaches it
		{200 * mib, 64 * mib, 100}, // large heaps as before
		{0, 64 * mib, 1600},        // nothing live: the runtime's 4 MiB minimum × 16
		{1, 64 * mib, 1600},        // bounded the same way
		{2 * mib, 64 * mib, 1600},  // 31× would put the minimum at 124 MiB
		{1, 4 * mib, 100},          // a floor at the minimum changes nothing
		{31 * mib, 64 * mib, 106},  // just under half
	} {
		if got := Percent(c.live, c.floor); got != c.want {
			t.Errorf("Percent(%d MiB, %d MiB) = %d, want %d", c.live/mib, c.floor/mib, got, c.want)
		}
	}
}

var sink []byte

// churn allocates n bytes of garbage in 4 KiB pieces, as decisions do, and
// returns how many collections ran meanwhile.
func churn(n int) uint32 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < n/4096; i++ {
		sink = make([]byte, 4096)
	}
	runtime.ReadMemStats(&after)
	return after.NumGC - before.NumGC
}

// TestFloorSpacesCollections: with a small live heap, 512 MiB of garbage
// takes well over a hundred collections at GOGC=100 and at most a dozen
// with a 64 MiB floor; the floor is gone after stop.
func TestFloorSpacesCollections(t *testing.T) {
	if Floor() != 0 {
		t.Fatal("a floor is already in force")
	}
	const total = 512 << 20
	// The comparison is against Go's default, whatever GOGC the tests run with.
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	runtime.GC()
	without := churn(total)

	stop := Start(64 << 20)
	runtime.GC() // the first adjustment after a collection
	with := churn(total)
	if got := Floor(); got != 64<<20 {
		t.Errorf("Floor() = %d, want 64 MiB", got)
	}
	stop()
	stop() // idempotent

	t.Logf("collections over %d MiB of garbage: %d at GOGC=100, %d with a 64 MiB floor", total>>20, without, with)
	if with == 0 || with*4 > without {
		t.Errorf("a 64 MiB floor ran %d collections where GOGC=100 ran %d; want fewer than a quarter", with, without)
	}
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("after stop the GC percentage is %d, want the 100 found at Start", p)
	}
	if Floor() != 0 {
		t.Error("a floor is still in force after stop")
	}
}

func TestSharedFloor(t *testing.T) {
	stopA := Start(32 << 20)
	stopB := Start(64 << 20)
	if got := Floor(); got != 64<<20 {
		t.Errorf("two Starts: Floor() = %d MiB, want the larger 64", got>>20)
	}
	stopA()
	if Floor() == 0 {
		t.Error("the floor ended while one user remains")
	}
	stopB()
	if Floor() != 0 {
		t.Error("the floor outlived its last user")
	}
	if got := Start(0); Floor() != 0 {
		t.Error("Start(0) set a floor")
	} else {
		got()
	}
}
