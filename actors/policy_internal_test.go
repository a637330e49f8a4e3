package actors

import (
	"testing"
	"time"
)

// TestNextStep is the flush decision, case by case.
func TestNextStep(t *testing.T) {
	t.Parallel()
	idle := laneState{pending: 1, maxInFlight: 2, network: true}
	with := func(f func(*laneState)) laneState { st := idle; f(&st); return st }
	window := Pipeline{Window: time.Millisecond}
	capped := Pipeline{MaxKeys: 3}
	for _, tc := range []struct {
		name        string
		st          laneState
		parallelMin int
		pl          Pipeline
		want        flushStep
	}{
		{"nothing waits", with(func(s *laneState) { s.pending = 0 }), 1, Pipeline{}, stepIdle},
		{"every call out", with(func(s *laneState) { s.inFlight = 2 }), 1, Pipeline{}, stepIdle},
		{"every call out, even when one just returned", with(func(s *laneState) { s.inFlight, s.callEnded = 2, true }), 1, Pipeline{}, stepIdle},
		{"idle lane sends at once", idle, 1, Pipeline{}, stepSend},
		{"a call out, parallel minimum 1", with(func(s *laneState) { s.inFlight = 1 }), 1, Pipeline{}, stepSend},
		{"a call out, under the parallel minimum", with(func(s *laneState) { s.inFlight = 1 }), 4, Pipeline{}, stepGroup},
		{"a call out, at the parallel minimum", with(func(s *laneState) { s.inFlight, s.pending = 1, 4 }), 4, Pipeline{}, stepSend},
		{"no call out: the parallel minimum does not apply", idle, 4, Pipeline{}, stepSend},
		{"open batch holds a network lane", with(func(s *laneState) { s.batchOpen = true }), 1, Pipeline{}, stepHold},
		{"open batch does not hold an inline lane", with(func(s *laneState) { s.batchOpen, s.network = true, false }), 1, Pipeline{}, stepSend},
		{"hold expired", with(func(s *laneState) { s.batchOpen, s.holdExpired = true, true }), 1, Pipeline{}, stepSend},
		{"a returned call sends what the batch held", with(func(s *laneState) { s.batchOpen, s.callEnded = true, true }), 1, Pipeline{}, stepSend},
		{"a full call sends what the batch held", with(func(s *laneState) { s.batchOpen, s.pending = true, 3 }), 1, capped, stepSend},
		{"hold comes before the parallel minimum", with(func(s *laneState) { s.batchOpen, s.inFlight = true, 1 }), 4, Pipeline{}, stepHold},
		{"a full call ignores the parallel minimum", with(func(s *laneState) { s.inFlight, s.pending = 1, 3 }), 4, capped, stepSend},
		{"window on an idle lane waits", idle, 1, window, stepWindow},
		{"window with a call out sends", with(func(s *laneState) { s.inFlight = 1 }), 1, window, stepSend},
		{"window elapsed sends", with(func(s *laneState) { s.callEnded = true }), 1, window, stepSend},
		{"window but full sends", with(func(s *laneState) { s.pending = 3 }), 1, Pipeline{Window: time.Millisecond, MaxKeys: 3}, stepSend},
		{"under the cap waits for the window", with(func(s *laneState) { s.pending = 2 }), 1, Pipeline{Window: time.Millisecond, MaxKeys: 3}, stepWindow},
	} {
		if got := nextStep(tc.st, tc.parallelMin, tc.pl); got != tc.want {
			t.Errorf("%s: %+v: step %d, want %d", tc.name, tc.st, got, tc.want)
		}
	}
}

func TestBatchPolicyDefaultsAndValidate(t *testing.T) {
	t.Parallel()
	p := DefaultBatchPolicy()
	if p.Hold != 250*time.Microsecond || p.ParallelMin != 1 || p.NoReleaseYield {
		t.Fatalf("defaults: %+v", p)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []BatchPolicy{
		{Hold: -1},
		{ParallelMin: -1},
		{Pipeline: Pipeline{MaxKeys: -1}},
		{PerSecondPipeline: Pipeline{Window: -1}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}
