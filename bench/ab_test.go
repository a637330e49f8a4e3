package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTurnOrder(t *testing.T) {
	for _, tc := range []struct {
		n, round int
		want     []int
	}{
		{1, 0, []int{0}},
		{3, 0, []int{0, 1, 2}},
		{3, 1, []int{0, 2, 1}},
		{5, 1, []int{0, 2, 3, 4, 1}},
		{5, 4, []int{0, 1, 2, 3, 4}},
	} {
		if got := turnOrder(tc.n, tc.round); !slices.Equal(got, tc.want) {
			t.Errorf("turnOrder(%d, %d) = %v, want %v", tc.n, tc.round, got, tc.want)
		}
	}
}

// TestPairRounds: the ratio is taken within each round, so a machine that
// ran three times slower in one round moves neither system's ratio.
func TestPairRounds(t *testing.T) {
	mk := func(decisions uint64, cpu float64) row {
		return row{res: loadResult{Decisions: decisions, Elapsed: time.Second}, cpuMs: cpu}
	}
	a := []row{mk(900, 11), mk(300, 33), mk(950, 10)}
	b := []row{mk(1000, 10), mk(1000/3, 30), mk(1000, 10)}
	r, ok := pairRounds(a, b)
	if !ok || r.rounds != 3 {
		t.Fatalf("pairRounds = %+v, %v", r, ok)
	}
	if r.rate < 0.899 || r.rate > 0.901 {
		t.Errorf("rate ratio %.3f, want the middle round ratio 0.900", r.rate)
	}
	if r.cpu < 1.099 || r.cpu > 1.101 {
		t.Errorf("CPU ratio %.3f, want 1.100", r.cpu)
	}
	if _, ok := pairRounds(nil, b); ok {
		t.Error("no rounds of a: want no ratio")
	}
}

func TestSettingsDiff(t *testing.T) {
	nocgo := []debug.BuildSetting{{Key: "CGO_ENABLED", Value: "0"}, {Key: "GOAMD64", Value: "v1"}, {Key: "vcs.revision", Value: "a"}}
	cgo := []debug.BuildSetting{{Key: "CGO_ENABLED", Value: "1"}, {Key: "GOAMD64", Value: "v1"}, {Key: "vcs.revision", Value: "b"}}
	if d := settingsDiff(nocgo, nocgo[:2]); d != "" {
		t.Errorf("like builds (another revision aside): %q, want none", d)
	}
	if d := settingsDiff(cgo, nocgo); !strings.Contains(d, "CGO_ENABLED 1 vs 0") {
		t.Errorf("cgo against no cgo: %q, want it named", d)
	}
	race := append(slices.Clone(nocgo), debug.BuildSetting{Key: "-race", Value: "true"})
	if d := settingsDiff(race, nocgo); !strings.Contains(d, "-race true vs (unset)") {
		t.Errorf("race against plain: %q, want it named", d)
	}
}

// TestBuildDifferenceReadsBinaries: the test binary against itself is
// alike; a path that is no binary is said, not taken for alike.
func TestBuildDifferenceReadsBinaries(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	if d := buildDifference(self, self); d != "" {
		t.Errorf("a binary against itself: %q", d)
	}
	if d := buildDifference(self, filepath.Join(t.TempDir(), "none")); !strings.Contains(d, "could not be compared") {
		t.Errorf("a missing binary: %q", d)
	}
}
