package alloc_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine/alloc"
)

// shortHub is a hub of two Envoys whose division moves the limit from one
// to the other: the cut goes at once, and the raise waits until the cut
// bucket is known applied (it is counted beside its replacement), on
// windows whose whole limit the hub holds. Nothing the hub can learn
// before the current window ends, but a report or an acknowledgement of
// the cut, makes room.
func shortHub() *alloc.Input {
	o := serviceOptions()
	base := int64(1_700_000_000) * sec
	now := base + 10*int64(time.Millisecond)
	in := &alloc.Input{Now: now, Plan: alloc.Plan{Kind: alloc.PlanDivide, Limit: 100}, Window: sec}
	for k := range 12 {
		in.Held = append(in.Held, alloc.Hold{Window: base + int64(k)*sec, N: 100})
	}
	for _, c := range []struct{ rate, claim float64 }{{85, 40}, {5, 60}} {
		r := alloc.Reporter{Live: true, Claim: alloc.Claim{Rate: c.claim, Known: true}, Period: 5 * time.Second, Bursty: 1}
		s, _ := in.Plan.Assign(c.rate, o)
		alloc.Commit(&r, alloc.Change{Strat: s, TTL: o.TTLFor(&r), Replace: true}, base, o)
		in.Reporters = append(in.Reporters, r)
	}
	return in
}

// TestShortPlanWaitsForNews: a plan that holds a raise back for room is
// planned again when the current window ends (or on news its caller plans
// on), not every RetryShort: no reservation can pay for the raise (the hub
// holds the whole limit), and retrying sooner found nothing changed.
func TestShortPlanWaitsForNews(t *testing.T) {
	in := shortHub()
	p := alloc.Planner{O: serviceOptions()}
	var out alloc.Output
	p.Decide(in, &out)
	if !out.Short {
		t.Fatalf("want a short plan (the raise waits for the cut), got changes %+v", out.Changes)
	}
	if !out.Spent {
		t.Errorf("the hub holds the whole limit where the raise failed: want Spent")
	}
	end := in.Now - in.Now%in.Window + in.Window
	if out.Next != end {
		t.Errorf("next plan at +%v, want the window's end, +%v", time.Duration(out.Next-in.Now), time.Duration(end-in.Now))
	}
	for _, rv := range out.Reserve {
		t.Errorf("the hub holds the whole limit: want no reservation, got %+v", rv)
	}
}
