package odata

import (
	"fmt"
	"testing"
	"time"
)

// Browser callers beyond the cap share one counter until a tracked one has
// been idle long enough to give its place up.
func TestRecentCallers(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	r := newRecent(3, 10*time.Second)
	for _, n := range []string{"a", "b", "c"} {
		if !r.admit(n, now) {
			t.Fatalf("%s not admitted with room", n)
		}
	}
	if r.admit("d", now.Add(time.Second)) {
		t.Fatal("d admitted into a full set of live callers")
	}
	if !r.admit("a", now.Add(9*time.Second)) || !r.admit("c", now.Add(9*time.Second)) {
		t.Fatal("a tracked caller lost its place")
	}
	// b is the least recently used, idle for 10 s: d takes its place.
	if !r.admit("d", now.Add(10*time.Second)) || r.len() != 3 {
		t.Fatalf("d after b went idle: %d tracked", r.len())
	}
	if r.admit("b", now.Add(10*time.Second)) {
		t.Fatal("b readmitted while c, a and d are live")
	}
}

// Failed key checks from more addresses than are tracked are counted
// together, so rotating addresses does not escape the throttle, and the
// map stays bounded.
func TestFailThrottleOverflow(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	f := newFailThrottle(3, time.Minute, func() time.Time { return now })
	for i := range maxTracked {
		f.failed(fmt.Sprint("10.0.", i/256, ".", i%256))
	}
	for i := range 3 {
		addr := fmt.Sprint("192.0.2.", i)
		if _, blocked := f.blocked(addr); blocked {
			t.Fatalf("new address %d blocked before the overflow's limit", i)
		}
		f.failed(addr)
	}
	if _, blocked := f.blocked("198.51.100.7"); !blocked {
		t.Fatal("a further new address is not blocked once the overflow is over its limit")
	}
	if len(f.m) > maxTracked+1 {
		t.Fatalf("%d entries tracked", len(f.m))
	}
	// A tracked address keeps its own window.
	if _, blocked := f.blocked("10.0.0.1"); blocked {
		t.Fatal("a tracked address with one failure is blocked")
	}
}
