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

// TestExpectHoldsUntilSent: while a decision announced by Expect has not
// sent its increments, others wait at the shard; its Increment sends them
// all in one call.
func TestExpectHoldsUntilSent(t *testing.T) {
	r, b := heldRouter(t, time.Hour)
	defer r.Close()
	errs := make(chan error, 2)
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
	wantAnswers(t, errs, 2, "the expected decision's Increment did not send the held one")
	done() // after its Increment: harmless
	if n := b.calls.Load(); n != 1 {
		t.Fatalf("%d backend calls, want 1 for the held and the expected decision", n)
	}
}

// TestExpectDoneReleases: done without an Increment lets what waits go.
// A router of its own: on one whose last call has just returned, the
// shard's news of that return would send what waits, and the hold could
// not be seen.
func TestExpectDoneReleases(t *testing.T) {
	r, b := heldRouter(t, time.Hour)
	defer r.Close()
	errs := make(chan error, 1)
	_, done := r.Expect(context.Background())
	go func() {
		errs <- r.Increment(context.Background(), []engine.Increment{{Key: "c", Hits: 1, TTL: time.Minute}})
	}()
	waitFor(t, func() bool { return r.Pending(0) == 1 })
	if n := b.calls.Load(); n != 0 {
		t.Fatalf("%d backend calls while a decision is expected", n)
	}
	done() // the expected decision sends nothing
	done()
	wantAnswers(t, errs, 1, "done did not let the held increment go")
	if n := b.calls.Load(); n != 1 {
		t.Fatalf("%d backend calls, want 1", n)
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

// TestExpectHeldAtClose: increments held for an expected decision that
// never sends are answered when the router closes, and a late done is
// harmless.
func TestExpectHeldAtClose(t *testing.T) {
	r, b := heldRouter(t, time.Hour)
	_, done := r.Expect(context.Background())
	errs := make(chan error, 1)
	go func() { errs <- r.Increment(context.Background(), []engine.Increment{{Key: "k", Hits: 1}}) }()
	waitFor(t, func() bool { return r.Pending(0) == 1 })
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; !errors.Is(err, actors.ErrClosed) {
		t.Fatalf("held at close: %v", err)
	}
	done()
	if n := b.calls.Load(); n != 0 {
		t.Fatalf("%d calls after close", n)
	}
}

// TestExpectHoldBounded: a shard that expected decisions keep holding sends
// what waits once it has held for long enough, so batches that keep
// overlapping under load never hold a shard for good.
func TestExpectHoldBounded(t *testing.T) {
	r, b := heldRouter(t, time.Millisecond)
	defer r.Close()
	_, done := r.Expect(context.Background())
	defer done()
	errs := make(chan error, 2)
	go func() { errs <- r.Increment(context.Background(), []engine.Increment{{Key: "slow", Hits: 1}}) }()
	waitFor(t, func() bool { return r.Pending(0) == 1 })
	// Longer than the shard holds: the next arrival sends both.
	time.Sleep(5 * time.Millisecond)
	go func() { errs <- r.Increment(context.Background(), []engine.Increment{{Key: "c", Hits: 1}}) }()
	wantAnswers(t, errs, 2, "held for good while a decision is expected")
	if n := b.calls.Load(); n != 1 {
		t.Fatalf("%d backend calls, want one with both increments", n)
	}
}

// wantAnswers waits for n answers on errs, each nil; stuck says what a
// wait of 10 s without them means.
func wantAnswers(t *testing.T, errs <-chan error, n int, stuck string) {
	t.Helper()
	for range n {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal(stuck)
		}
	}
}

// heldRouter is a router of one shard with a network lane that holds for
// at most hold; the caller closes it.
func heldRouter(t *testing.T, hold time.Duration) (*actors.Router, *slowBackend) {
	t.Helper()
	b := &slowBackend{mem: memory.New(nil)}
	r, err := actors.New(actors.Options{Shards: 1, Hold: hold, Backend: func(int) engine.Backend { return b }})
	if err != nil {
		t.Fatal(err)
	}
	return r, b
}
