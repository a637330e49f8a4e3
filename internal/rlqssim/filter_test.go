package rlqssim

import (
	"github.com/sluicehq/sluice/engine/alloc"
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

// TestLegacyBucketOneMore plays Envoy's two token buckets as their source
// reads (token_bucket_impl.cc): made full with 2 tokens at 10 a second,
// left alone for a second, then asked every millisecond for a second.
// AtomicTokenBucketImpl (the global client's) admits its 2 tokens and its
// rate; TokenBucketImpl (the per-worker client's) refills only a bucket
// that is not full, so its second request is credited the second it sat
// full: one token more in that window (alloc.LegacyCredit counts it).
func TestLegacyBucketOneMore(t *testing.T) {
	t0 := time.Unix(1000, 0)
	admitted := func(legacy bool) int {
		tb := &tokenBucket{max: 2, rate: 10, tokens: 2, last: t0, legacy: legacy}
		n := 0
		for ms := range 1000 {
			if tb.take(t0.Add(time.Second + time.Duration(ms)*time.Millisecond)) {
				n++
			}
		}
		return n
	}
	atomicN, legacyN := admitted(false), admitted(true)
	// Within the window [1 s, 2 s): 2 + 10 × 0.999 s, whole tokens.
	if atomicN != 11 || legacyN != atomicN+alloc.LegacyCredit {
		t.Errorf("admitted %d (atomic) and %d (legacy), want 11 and %d", atomicN, legacyN, 11+alloc.LegacyCredit)
	}
}
