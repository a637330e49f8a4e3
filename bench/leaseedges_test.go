package main

import (
	"strings"
	"testing"
	"time"
)

// TestRenderEdgesPairs: exact mode's row is the ratios' base; a lease
// row shows the median of its pairs' ratios, their range and count, in
// any order given.
func TestRenderEdgesPairs(t *testing.T) {
	rows := []edgeRow{
		{rtt: time.Millisecond, mode: "exact", cold: 200 * time.Millisecond},
		{rtt: time.Millisecond, mode: "lease", cold: 210 * time.Millisecond, coldRatios: []float64{1.18, 0.84, 1.01, 0.99, 1.05}},
	}
	out := renderEdges(rows)
	for _, want := range []string{
		"| 1ms | exact | 200.00ms | 1.00 |",
		"| 1ms | lease | 210.00ms | 1.01 (0.84–1.18, 5 pairs) |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if rows[1].coldRatios[0] != 1.18 {
		t.Error("renderEdges reordered the row's ratios")
	}
}
