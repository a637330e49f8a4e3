package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/rlqssim"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/testenv/rlsserver"
)

// TestMain lets this test binary be the flood's probe process: startProbe
// runs os.Executable() with -probe-target, as the command does.
func TestMain(m *testing.M) {
	for i, a := range os.Args {
		if a == "-probe-target" && i+1 < len(os.Args) {
			if err := probeChild(context.Background(), os.Args[i+1]); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
	flag.Parse()
	rlsserver.VerifyNoLeaks(m)
}

// TestProbe runs the flood's probe against a real sluice, in its own
// process and in this one: both must answer probes and RLS decisions and
// hand back what they saw when stopped.
func TestProbe(t *testing.T) {
	for _, own := range []bool{true, false} {
		t.Run(probeWhere(own), func(t *testing.T) {
			h := rlsserver.StartEnvClock(t, nil, map[string]string{"q.yaml": rlqssim.ScenarioRules}, nil)
			stop, err := startProbe(context.Background(), h.GRPC, own, pinning{})
			if err != nil {
				t.Fatal(err)
			}
			// The probe subscribes its next bucket only once the last one
			// was answered: a third bucket tracked means two answers.
			testenv.Eventually(t, "two probes answered and three RLS decisions", func() bool {
				return h.Stats.Gauge("ratelimit.rlqs.reporters").Value() >= 3 &&
					h.Stats.CounterValue("ratelimit.service.rate_limit.q.user.total_hits") >= 3
			})
			r, err := stop()
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Took) < 2 || len(r.Sent) != len(r.Took) || r.RLSCalls < 3 {
				t.Errorf("%d probes answered (%d send times), %d RLS decisions: want at least 2 and 3", len(r.Took), len(r.Sent), r.RLSCalls)
			}
			if r.ProbeErr != "" || r.RLSErr != "" {
				t.Errorf("probe error %q, RLS error %q", r.ProbeErr, r.RLSErr)
			}
		})
	}
}
