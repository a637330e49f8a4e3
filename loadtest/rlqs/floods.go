package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// probeBound is the bound on a probe's answer during a flood.
const probeBound = 200 * time.Millisecond

// floods runs the flood o.repeat times, each on a sluice of its own, and
// prints, after the runs' own lines, the distribution of their worst probe
// answers: a flood's tail is heavy and moves from run to run (on grpc-go,
// streams:10000, 37-251 ms over 34 runs of one binary), so one run, or a
// few, cannot tell two trees apart. What broke in any run is returned.
func floods(ctx context.Context, o options, row floodRow) ([]string, error) {
	if o.repeat < 1 {
		return nil, fmt.Errorf("-repeat %d: at least 1", o.repeat)
	}
	if o.repeat > 1 && o.profile != "" {
		return nil, errors.New("-repeat with -profile: each run would overwrite the last one's profile")
	}
	var broken []string
	var worst []time.Duration
	for i := range o.repeat {
		w, b, err := flood(ctx, o, row)
		if err != nil {
			return nil, err
		}
		for _, line := range b {
			broken = append(broken, fmt.Sprintf("run %d: %s", i+1, line))
		}
		if len(b) == 0 {
			worst = append(worst, w)
		}
	}
	if o.repeat > 1 {
		fmt.Println(summarizeWorst(row.name, o.server, worst))
	}
	return broken, nil
}

// summarizeWorst is one line about the runs' worst probe answers.
func summarizeWorst(row, server string, worst []time.Duration) string {
	if len(worst) == 0 {
		return fmt.Sprintf("flood %s %s: no run without a failure", row, server)
	}
	w := slices.Clone(worst)
	slices.Sort(w)
	over := 0
	for _, d := range w {
		if d > probeBound {
			over++
		}
	}
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("flood %s %s, %d runs: worst probe min %v, median %v, p90 %v, max %v; %d over %v",
		row, server, len(w), r(w[0]), r(testenv.Percentile(w, 0.5)), r(testenv.Percentile(w, 0.9)), r(w[len(w)-1]), over, probeBound)
}
