package main

import (
	"testing"
	"time"
)

// TestSummarizeWorst: the runs' worst probe answers, in any order, as a
// distribution and a count past the bound.
func TestSummarizeWorst(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		worst []time.Duration
		want  string
	}{
		{nil, "flood streams:10000 grpc-go: no run without a failure"},
		{[]time.Duration{90 * ms}, "flood streams:10000 grpc-go, 1 runs: worst probe min 90ms, median 90ms, p90 90ms, max 90ms; 0 over 200ms"},
		{[]time.Duration{251 * ms, 37 * ms, 200 * ms, 120 * ms, 201 * ms},
			"flood streams:10000 grpc-go, 5 runs: worst probe min 37ms, median 200ms, p90 251ms, max 251ms; 2 over 200ms"},
	} {
		if got := summarizeWorst("streams:10000", "grpc-go", tc.worst); got != tc.want {
			t.Errorf("%v:\n got %s\nwant %s", tc.worst, got, tc.want)
		}
	}
}
