package engine_test

import (
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/engine"
)

// TestCeilSeconds: expiries and reset headers round up, so a counter never
// expires before its window and a client is never told to retry too early.
func TestCeilSeconds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 0},
		{time.Nanosecond, 1},
		{time.Second, 1},
		{time.Second + time.Nanosecond, 2},
		{1500 * time.Millisecond, 2},
		{time.Minute, 60},
		{30*24*time.Hour + time.Millisecond, 30*24*60*60 + 1},
	} {
		if got := engine.CeilSeconds(tc.d); got != tc.want {
			t.Errorf("CeilSeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// TestCounterOpValidate: each constructor makes an operation of its kind
// with its own fields only; one that carries another kind's field, or an
// unknown kind, is reported.
func TestCounterOpValidate(t *testing.T) {
	t.Parallel()
	b := engine.Bucket{Now: 1, Interval: 2, Burst: 3}
	for _, op := range []engine.CounterOp{
		engine.Add("k", 1, time.Minute), engine.Add("k", 0, time.Minute).OnSecondLane(true),
		engine.Get("k"), engine.Reserve("k", 2, time.Minute), engine.Release("k", 3),
		engine.BucketStep("k", 1, b), engine.BucketTake("k", 4, b),
	} {
		if err := op.Validate(); err != nil {
			t.Errorf("%v: %v", op.Kind, err)
		}
	}
	get, release, step := engine.Get("k"), engine.Release("k", 1), engine.BucketStep("k", 1, b)
	get.Hits, release.TTL, step.TTL = 1, time.Second, time.Second
	add := engine.Add("k", 1, time.Minute)
	add.Bucket = b
	unknown := engine.Add("k", 1, time.Minute)
	unknown.Kind = 200
	for _, op := range []engine.CounterOp{get, release, step, add, unknown} {
		if err := op.Validate(); err == nil {
			t.Errorf("%v %+v: valid, want an error", op.Kind, op)
		}
	}
}

// TestCounterOpSize: an operation is copied into every call's slice and
// coalesced entry; its kinds' own structs cost it nothing (96 bytes, what
// the one struct of all kinds took).
func TestCounterOpSize(t *testing.T) {
	t.Parallel()
	if n := unsafe.Sizeof(engine.CounterOp{}); n > 96 {
		t.Fatalf("CounterOp is %d bytes, want at most 96", n)
	}
}
