package actors_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
)

// TestCohortLeavesTogether: a cohort member's increments wait at the shard,
// and hold back what else arrives there, until every member has sent or
// left; then everything leaves in one call, counted exactly.
func TestCohortLeavesTogether(t *testing.T) {
	b := &slowBackend{mem: memory.New(nil)}
	r, err := actors.New(actors.Options{Shards: 1, CohortHold: time.Hour, Backend: func(int) engine.Backend { return b }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !r.HoldsCohorts() {
		t.Fatal("a network backend's router must hold cohorts")
	}

	c := actors.NewCohort(3)
	type answer struct {
		ops []engine.Increment
		err error
	}
	answers := make(chan answer, 3)
	send := func(ctx context.Context, keys ...string) {
		ops := make([]engine.Increment, len(keys))
		for i, k := range keys {
			ops[i] = engine.Increment{Key: k, Hits: 1, TTL: time.Minute}
		}
		err := r.Increment(ctx, ops)
		answers <- answer{ops, err}
	}
	go send(c.Join(context.Background(), 0), "a")
	waitFor(t, func() bool { return r.Pending(0) == 1 })
	// A decision outside the cohort waits too: were member 0's increment
	// sent, the shard's queue would have emptied before this one arrived.
	go send(context.Background(), "a")
	waitFor(t, func() bool { return r.Pending(0) == 2 })
	c.Leave(1) // member 1 sends nothing (a health check, say)
	if n := b.calls.Load(); n != 0 {
		t.Fatalf("%d backend calls before the cohort is complete", n)
	}
	go send(c.Join(context.Background(), 2), "a", "b")
	got := map[string][]uint64{}
	for range 3 {
		a := <-answers
		if a.err != nil {
			t.Fatal(a.err)
		}
		for _, op := range a.ops {
			got[op.Key] = append(got[op.Key], op.After)
		}
	}
	c.Leave(0)
	c.Leave(2) // after sending: harmless
	if n := b.calls.Load(); n != 1 {
		t.Errorf("%d backend calls, want the cohort's and the held decision's one", n)
	}
	if len(got["a"]) != 3 || len(got["b"]) != 1 || got["b"][0] != 1 {
		t.Fatalf("counts %v", got)
	}
	seen := map[uint64]bool{}
	for _, n := range got["a"] {
		seen[n] = true
	}
	if !seen[1] || !seen[2] || !seen[3] {
		t.Fatalf("counts of a %v, want 1, 2 and 3", got["a"])
	}
}

// TestCohortMembersThatSendNothing: a cohort whose members all leave
// without sending holds nothing, and a member that sends once the cohort is
// complete is not held.
func TestCohortMembersThatSendNothing(t *testing.T) {
	b := &slowBackend{mem: memory.New(nil)}
	r, err := actors.New(actors.Options{Shards: 2, Backend: func(int) engine.Backend { return b }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := actors.NewCohort(2)
	ctx := c.Join(context.Background(), 0)
	c.Leave(1)
	c.Leave(0)
	if err := r.Increment(ctx, []engine.Increment{{Key: "k", Hits: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := r.Increment(context.Background(), []engine.Increment{{Key: "k", Hits: 1}}); err != nil {
		t.Fatal(err)
	}
}

// TestCohortIgnoredInline: with a backend that answers in place (memory)
// nothing is held: a member is answered while its cohort is incomplete.
func TestCohortIgnoredInline(t *testing.T) {
	r, err := actors.New(actors.Options{Shards: 2, Backend: func(int) engine.Backend { return memory.New(nil) }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.HoldsCohorts() {
		t.Fatal("an inline backend's router must not hold cohorts")
	}
	c := actors.NewCohort(2)
	ops := []engine.Increment{{Key: "k", Hits: 1}}
	if err := r.Increment(c.Join(context.Background(), 0), ops); err != nil || ops[0].After != 1 {
		t.Fatalf("after %d, %v", ops[0].After, err)
	}
}

// TestCohortHeldAtClose: increments held for a cohort that never completes
// are answered when the router closes, and a late release is harmless.
func TestCohortHeldAtClose(t *testing.T) {
	b := &slowBackend{mem: memory.New(nil)}
	r, err := actors.New(actors.Options{Shards: 1, CohortHold: time.Hour, Backend: func(int) engine.Backend { return b }})
	if err != nil {
		t.Fatal(err)
	}
	c := actors.NewCohort(2)
	errs := make(chan error, 1)
	go func() { errs <- r.Increment(c.Join(context.Background(), 0), []engine.Increment{{Key: "k", Hits: 1}}) }()
	waitFor(t, func() bool { return r.Pending(0) == 1 })
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; !errors.Is(err, actors.ErrClosed) {
		t.Fatalf("held at close: %v", err)
	}
	c.Leave(1)
	if n := b.calls.Load(); n != 0 {
		t.Fatalf("%d calls after close", n)
	}
}

// TestOverlappingCohorts: a shard that a cohort keeps holding sends what
// waits once it has held for long enough, so cohorts that keep overlapping
// under load never hold a shard for good.
func TestOverlappingCohorts(t *testing.T) {
	b := &slowBackend{mem: memory.New(nil)}
	r, err := actors.New(actors.Options{Shards: 1, CohortHold: time.Millisecond, Backend: func(int) engine.Backend { return b }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	slow := actors.NewCohort(2)
	errs := make(chan error, 2)
	go func() {
		errs <- r.Increment(slow.Join(context.Background(), 0), []engine.Increment{{Key: "slow", Hits: 1}})
	}()
	waitFor(t, func() bool { return r.Pending(0) == 1 })
	// Longer than the shard holds: the next cohort to complete sends both.
	time.Sleep(5 * time.Millisecond)
	c := actors.NewCohort(1)
	go func() { errs <- r.Increment(c.Join(context.Background(), 0), []engine.Increment{{Key: "c", Hits: 1}}) }()
	for range 2 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("held while another cohort is incomplete")
		}
	}
	if n := b.calls.Load(); n != 1 {
		t.Fatalf("%d backend calls, want one with both cohorts' increments", n)
	}
	slow.Leave(1)
}

// TestExpectHoldsUntilSent: while a decision announced by Expect has not
// sent its increments, others wait at the shard; its Increment sends them
// all in one call. done without an Increment lets them go too.
func TestExpectHoldsUntilSent(t *testing.T) {
	b := &slowBackend{mem: memory.New(nil)}
	r, err := actors.New(actors.Options{Shards: 1, CohortHold: time.Hour, Backend: func(int) engine.Backend { return b }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	errs := make(chan error, 3)
	send := func(ctx context.Context, key string) {
		errs <- r.Increment(ctx, []engine.Increment{{Key: key, Hits: 1, TTL: time.Minute}})
	}

	ctx, done := r.Expect(context.Background())
	go send(context.Background(), "a")
	waitFor(t, func() bool { return r.Pending(0) == 1 })
	if n := b.calls.Load(); n != 0 {
		t.Fatalf("%d backend calls while a decision is expected", n)
	}
	go send(ctx, "b")
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	done() // after its Increment: harmless
	if n := b.calls.Load(); n != 1 {
		t.Fatalf("%d backend calls, want 1 for the held and the expected decision", n)
	}

	_, done = r.Expect(context.Background())
	go send(context.Background(), "c")
	waitFor(t, func() bool { return r.Pending(0) == 1 })
	done() // the expected decision sends nothing
	done()
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if n := b.calls.Load(); n != 2 {
		t.Fatalf("%d backend calls, want 2", n)
	}
}

// TestExpectInlineChangesNothing: without a network lane nothing is held.
func TestExpectInlineChangesNothing(t *testing.T) {
	r, err := actors.New(actors.Options{Shards: 1, Backend: func(int) engine.Backend { return memory.New(nil) }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, done := r.Expect(context.Background())
	defer done()
	if err := r.Increment(context.Background(), []engine.Increment{{Key: "a", Hits: 1, TTL: time.Minute}}); err != nil {
		t.Fatal(err)
	}
}
