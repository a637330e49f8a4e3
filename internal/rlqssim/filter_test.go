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
// reads (token_bucket_impl.cc), through each client's filter: a bucket of
// 2 tokens at 10 a second assigned, left alone for a second, then asked
// every millisecond for a second. The global client's
// AtomicTokenBucketImpl admits its 2 tokens and its rate; the per-worker
// client's TokenBucketImpl refills only a bucket that is not full, so its
// second request is credited the second it sat full: one token more in
// that window (alloc.LegacyCredit counts it).
func TestLegacyBucketOneMore(t *testing.T) {
	t0 := time.Unix(1_750_000_000, 0)
	admitted := func(client Client) int {
		f := NewFilter(client, Behaviors{ReportingInterval: time.Second})
		f.Request(0, t0) // subscribes
		tb := Strategy{Kind: TokenBucket, MaxTokens: 2, TokensPerFill: 10, FillInterval: time.Second}
		f.Apply([]Action{{Bucket: 0, Strategy: tb, FillNanos: 0, TTL: 10 * time.Second}}, t0)
		n := 0
		for ms := range 1000 {
			if ok, _ := f.Request(0, t0.Add(time.Second+time.Duration(ms)*time.Millisecond)); ok {
				n++
			}
		}
		return n
	}
	global, perWorker := admitted(Global), admitted(PerWorker)
	// Within the window [1 s, 2 s): 2 + 10 × 0.999 s, whole tokens.
	if global != 11 || perWorker != global+alloc.LegacyCredit {
		t.Errorf("admitted %d (global client) and %d (per-worker), want 11 and %d", global, perWorker, 11+alloc.LegacyCredit)
	}
}
