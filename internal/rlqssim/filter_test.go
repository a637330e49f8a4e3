package rlqssim

import (
	"testing"
	"time"
)

// TestFilterUnassigned: a bucket is decided by the Envoy's own
// no_assignment_behavior from its creation to the server's first answer
// (the fleet counts those admissions apart), and again after a restart;
// an expiry later is a lapse, not "unassigned".
func TestFilterUnassigned(t *testing.T) {
	now := time.Unix(1_750_000_000, 0)
	f := NewFilter(PerWorker, Behaviors{ReportingInterval: time.Second})
	if f.Unassigned(0) {
		t.Fatal("an untracked bucket is not unassigned: it has no requests")
	}
	if ok, _ := f.Request(0, now); !ok || !f.Unassigned(0) {
		t.Fatalf("first request: allowed %v unassigned %v, want ALLOW_ALL's true, true", ok, f.Unassigned(0))
	}
	f.Apply([]Action{{Bucket: 0, Strategy: Strategy{Kind: DenyAll}, TTL: 2 * time.Second}}, now)
	if ok, _ := f.Request(0, now); ok || f.Unassigned(0) {
		t.Fatalf("after DENY_ALL: allowed %v unassigned %v, want false, false", ok, f.Unassigned(0))
	}
	later := now.Add(3 * time.Second) // the assignment expired
	if ok, _ := f.Request(0, later); !ok || f.Unassigned(0) {
		t.Fatalf("after expiry: allowed %v unassigned %v, want true (the default again), false (a lapse)", ok, f.Unassigned(0))
	}
	f.Reset()
	if ok, _ := f.Request(0, later); !ok || !f.Unassigned(0) {
		t.Fatalf("after a restart: allowed %v unassigned %v, want true, true", ok, f.Unassigned(0))
	}
}
