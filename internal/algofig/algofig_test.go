package algofig

import (
	"bytes"
	"os"
	"testing"
	"time"
)

// TestScenario pins what the figure shows: the fixed window admits its limit
// on each side of the edge (2×), the sliding window holds the rolling second
// to the limit, the token bucket admits its burst then its rate.
func TestScenario(t *testing.T) {
	series, err := Run()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, s := range series {
		got[s.Name] = len(s.Admitted)
	}
	// Token bucket: 10 at once at 0.80 s, then one per 100 ms up to 1.2 s.
	want := map[string]int{"fixed_window": 20, "sliding_window": 10, "token_bucket": 14}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s admitted %d, want %d", k, got[k], v)
		}
	}
	for _, s := range series {
		if s.Name == "fixed_window" {
			continue
		}
		// Any rolling second holds at most the limit (+ the rate's share for the bucket).
		for i := range s.Admitted {
			n := 0
			for j := i; j < len(s.Admitted) && s.Admitted[j]-s.Admitted[i] < time.Second; j++ {
				n++
			}
			if max := map[string]int{"sliding_window": 10, "token_bucket": 20}[s.Name]; n > max {
				t.Errorf("%s: %d in the second from %v", s.Name, n, s.Admitted[i])
			}
		}
	}
}

// TestFigureIsCurrent fails when docs/algorithms.svg is not what the
// program draws now: run `go run ./internal/algofig/cmd > docs/algorithms.svg`.
func TestFigureIsCurrent(t *testing.T) {
	series, err := Run()
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile("../../docs/algorithms.svg")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, SVG(series)) {
		t.Fatal("docs/algorithms.svg is stale: go run ./internal/algofig/cmd > docs/algorithms.svg")
	}
}
