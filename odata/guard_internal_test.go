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

// Failed key checks from more networks than are tracked are counted
// together, so rotating networks does not escape the throttle, and the map
// stays bounded; but the shared count never refuses a check before the
// key is looked up (failOverflow), so valid keys from new networks pass.
func TestFailThrottleOverflow(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	f := newFailThrottle(3, time.Minute, func() time.Time { return now })
	f.max = 64
	for i := range f.max {
		f.failed(fmt.Sprint("10.0.", i, ".1"))
	}
	for i := range 3 {
		addr := fmt.Sprint("192.0.", i, ".1")
		if _, st := f.check(addr); st != failAllowed {
			t.Fatalf("new network %d: %v before the overflow's limit", i, st)
		}
		f.failed(addr)
	}
	if _, st := f.check("198.51.100.7"); st != failOverflow {
		t.Fatalf("a further new network: %v, want failOverflow (looked up, failures 429)", st)
	}
	if len(f.m) > f.max {
		t.Fatalf("%d entries tracked", len(f.m))
	}
	// A tracked network keeps its own window.
	if _, st := f.check("10.0.0.1"); st != failAllowed {
		t.Fatalf("a tracked network with one failure: %v", st)
	}
	// Once the tracked windows end, a new network gets a place again.
	now = now.Add(time.Minute)
	f.failed("203.0.113.9")
	if _, ok := f.m[failNetwork("203.0.113.9")]; !ok {
		t.Fatal("no place for a new network after the windows ended")
	}
}

// Failures are counted per IPv4 /24 and IPv6 /64: rotating addresses
// within one network is one caller.
func TestFailThrottlePerNetwork(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	f := newFailThrottle(3, time.Minute, func() time.Time { return now })
	for i := range 3 {
		f.failed(fmt.Sprintf("2001:db8:1:2::%x", i+1))
		f.failed(fmt.Sprint("198.51.100.", i+1))
	}
	for _, tc := range []struct {
		addr string
		want failState
	}{
		{"2001:db8:1:2:ffff::9", failBlocked},
		{"198.51.100.200", failBlocked},
		{"::ffff:198.51.100.77", failBlocked},
		{"2001:db8:1:3::1", failAllowed},
		{"198.51.101.1", failAllowed},
	} {
		if _, st := f.check(tc.addr); st != tc.want {
			t.Errorf("%s: %v, want %v", tc.addr, st, tc.want)
		}
	}
}
