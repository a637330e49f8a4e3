package stats

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestDynamicCounterBounds(t *testing.T) {
	s := NewStore()
	s.SetDynamicLimit(3, 20)
	for i := 0; i < 5; i++ {
		s.DynamicCounter(fmt.Sprintf("dyn.%d", i), "dyn.overflow").Inc()
	}
	s.DynamicCounter("dyn."+strings.Repeat("x", 20), "dyn.overflow").Inc() // too long
	s.DynamicCounter("dyn.0", "dyn.overflow").Inc()                        // existing: its own
	for name, want := range map[string]uint64{"dyn.0": 2, "dyn.1": 1, "dyn.2": 1, "dyn.3": 0, "dyn.overflow": 3} {
		if got := s.CounterValue(name); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	if got := s.DynamicNames(); got != 3 {
		t.Errorf("DynamicNames %d, want 3", got)
	}
	if got := s.Len(); got != 4 {
		t.Errorf("Len %d, want 4 (3 names and the overflow)", got)
	}
}

func TestReleaseAndSweep(t *testing.T) {
	s := NewStore()
	a, b := s.Counter("rule.a"), s.Counter("rule.b")
	a.Inc()
	b.Inc()
	s.Release("rule.a", "rule.b", "rule.unknown")
	if got := s.Sweep(); got != nil {
		t.Fatalf("first sweep after Release deleted %q: a sink has not read the last values yet", got)
	}
	s.Counter("rule.b") // a reload brings rule b back before its deletion
	if got := s.Sweep(); !slices.Equal(got, []string{"rule.a"}) {
		t.Fatalf("second sweep deleted %q, want rule.a", got)
	}
	if s.CounterValue("rule.a") != 0 || s.CounterValue("rule.b") != 1 {
		t.Errorf("after the sweep: a=%d b=%d, want 0 and 1", s.CounterValue("rule.a"), s.CounterValue("rule.b"))
	}
	if got := s.Sweep(); got != nil {
		t.Errorf("nothing left to delete, got %q", got)
	}
}

func TestIdleDynamicReleased(t *testing.T) {
	s := NewStore()
	s.SetDynamicLimit(2, 100)
	busy, idle := s.DynamicCounter("busy", "o"), s.DynamicCounter("idle", "o")
	busy.Inc()
	idle.Inc()
	s.Sweep() // both changed since creation
	busy.Inc()
	s.Sweep() // idle unchanged for a whole interval: released
	if got := s.DynamicCounter("third", "o"); got != s.Counter("o") {
		t.Error("a third name while two are held should count under the overflow name")
	}
	busy.Inc()
	if got := s.Sweep(); !slices.Equal(got, []string{"idle"}) {
		t.Fatalf("deleted %q, want idle", got)
	}
	if s.DynamicNames() != 1 {
		t.Fatalf("DynamicNames %d, want 1", s.DynamicNames())
	}
	s.DynamicCounter("third", "o").Inc()
	if s.CounterValue("third") != 1 {
		t.Error("room freed by the idle name is not reused")
	}
	// A name a rule takes over is no longer released when idle.
	s.DynamicCounter("owned", "o")
	s.Counter("third")
	for i := 0; i < 3; i++ {
		s.Sweep()
	}
	if _, ok := s.m.Load("third"); !ok {
		t.Error("a name a rule owns was released")
	}
}

func TestDynamicRevivedBeforeDeletion(t *testing.T) {
	s := NewStore()
	c := s.DynamicCounter("d", "o")
	c.Inc()
	s.Sweep()
	s.Sweep() // idle: released
	s.DynamicCounter("d", "o").Inc()
	if got := s.Sweep(); got != nil {
		t.Fatalf("a name used again was deleted: %q", got)
	}
	if s.CounterValue("d") != 2 {
		t.Errorf("d = %d, want 2", s.CounterValue("d"))
	}
}
