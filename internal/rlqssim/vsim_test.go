package rlqssim

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine/alloc"
)

// TestScenarios runs the rows in simulated time against the quota
// service itself: every client, no_assignment_behavior, arrival pattern
// and transport (with and without delivery acknowledgements).
func TestScenarios(t *testing.T) {
	t.Parallel()
	for _, client := range []Client{Global, PerWorker} {
		for _, na := range []Strategy{{Kind: AllowAll}, {Kind: DenyAll}} {
			for _, sc := range Scenarios(client, na) {
				for _, arr := range []Arrivals{Even, Poisson} {
					for _, acks := range []bool{true, false} {
						name := fmt.Sprintf("%s/%s/%s/%s/acks=%v", client, na.Kind, sc.Name, arr, acks)
						t.Run(name, func(t *testing.T) {
							t.Parallel()
							run, err := Simulate(sc.VConfig(arr, acks, 1))
							if err != nil {
								t.Fatal(err)
							}
							c := sc.Criteria(arr)
							var rls []uint64
							if len(run.RLS) > 0 {
								rls = run.RLS[0]
							}
							v := Judge(c, run.Admitted[0], rls, sc.RLSDemand(), func(e int, at time.Duration) float64 { return sc.Demand(e, 0, at) }, sc.FaultTimes())
							t.Log(Summary(name, v, run.Lapses))
							if v.Over > 0 || run.Lapses > 0 || len(v.Failures) > 0 {
								t.Errorf("never over, never lapsing, use and fairness above the floors: %v %v", v.Failures, run.LapseLog)
							}
						})
					}
				}
			}
		}
	}
}

// scenarioNamed is the scenario of that name for client and
// no_assignment_behavior kind.
func scenarioNamed(t *testing.T, client Client, kind Kind, name string) Scenario {
	t.Helper()
	for _, s := range Scenarios(client, Strategy{Kind: kind}) {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no scenario %q", name)
	return Scenario{}
}

// TestSimulateDeterministic runs scenarios twice with one seed and wants
// the same trace, line for line: a floor missed by one admission must be
// the same miss on the next run, not a coin toss. Before, delays came
// from one generator in the order the service pushed to its streams (map
// order) and the memory board returned claims in map order, so most
// per-worker and three-replica scenarios differed run to run.
func TestSimulateDeterministic(t *testing.T) {
	t.Parallel()
	cases := []struct {
		client Client
		name   string
		arr    Arrivals
	}{
		{PerWorker, "skewed, demand shift", Even},
		{PerWorker, "three replicas, shift", Poisson},
		{Global, "whole fleet restarted", Even},
	}
	for _, c := range cases {
		sc := scenarioNamed(t, c.client, DenyAll, c.name)
		var traces [2][]string
		for i := range traces {
			cfg := sc.VConfig(c.arr, false, 1)
			cfg.Trace = func(f string, a ...any) { traces[i] = append(traces[i], fmt.Sprintf(f, a...)) }
			if _, err := Simulate(cfg); err != nil {
				t.Fatal(err)
			}
		}
		a, b := traces[0], traces[1]
		for j := range min(len(a), len(b)) {
			if a[j] != b[j] {
				t.Fatalf("%s/%s/%s: the same seed gave two runs; first difference at trace line %d:\n%s\n%s", c.client, c.name, c.arr, j, a[j], b[j])
			}
		}
		if len(a) != len(b) {
			t.Fatalf("%s/%s/%s: traces of %d and %d lines", c.client, c.name, c.arr, len(a), len(b))
		}
	}
}

// TestPerWorkerReportsLikeEnvoy: the per-worker client's periodic reports
// carry a time_elapsed that is not a whole number of seconds (its timer
// fires late, and it reports to the nanosecond), which is how the service
// tells it from the newest client; the global clients' are whole seconds.
// Played exact, every per-worker report after a bucket's first said 1 s
// to the nanosecond, and the service took these Envoys for the newest
// client: the scenarios did not test what real per-worker Envoys get.
func TestPerWorkerReportsLikeEnvoy(t *testing.T) {
	t.Parallel()
	for _, client := range []Client{PerWorker, Global} {
		sc := scenarioNamed(t, client, AllowAll, "skewed, demand shift")
		cfg := sc.VConfig(Even, true, 1)
		cfg.Duration = 10 * time.Second
		var periodic, whole int
		cfg.Trace = func(f string, a ...any) {
			line := fmt.Sprintf(f, a...)
			i := strings.LastIndex(line, " denied over ")
			if i < 0 {
				return
			}
			el, err := time.ParseDuration(line[i+len(" denied over "):])
			if err != nil {
				t.Errorf("%s: %v", line, err)
				return
			}
			if el >= alloc.MinElapsed {
				periodic++
				if el%time.Second == 0 {
					whole++
				}
			}
		}
		if _, err := Simulate(cfg); err != nil {
			t.Fatal(err)
		}
		// Ten Envoys, each reporting every second (per-worker) or every
		// 5 s (global).
		want := map[Client]int{PerWorker: 80, Global: 10}[client]
		switch {
		case periodic < want:
			t.Errorf("%s: %d periodic reports in 10 s, want at least %d", client, periodic, want)
		case client == PerWorker && whole > 0:
			t.Errorf("%s: %d of %d periodic reports over a whole number of seconds, want none", client, whole, periodic)
		case client == Global && whole != periodic:
			t.Errorf("%s: %d of %d periodic reports over a whole number of seconds, want all", client, whole, periodic)
		}
	}
}

// TestPerWorkerNeverReopens: the per-worker client's timer sends only on
// an open stream and never opens one (client_impl.cc, sendUsageReport;
// only a new bucket's first request starts a stream), so an Envoy whose
// stream was cut reports no more, while a global client reopens at its
// next report timer. Played as the global client, the cut per-worker
// Envoys came back within a second, and the scenarios judged the service
// on reconnections real ones never make.
func TestPerWorkerNeverReopens(t *testing.T) {
	t.Parallel()
	for _, client := range []Client{PerWorker, Global} {
		sc := scenarioNamed(t, client, DenyAll, "stream cuts")
		cut := sc.Faults[0]
		cfg := sc.VConfig(Even, true, 1)
		cfg.Duration = cut.At + 12*time.Second
		opened := 0
		prefix := fmt.Sprintf("envoy %d/0: stream ", cut.Envoy)
		cfg.Trace = func(f string, a ...any) {
			line := strings.TrimSpace(fmt.Sprintf(f, a...))
			at, rest, ok := strings.Cut(line, " ")
			secs, err := strconv.ParseFloat(at, 64)
			if ok && err == nil && time.Duration(secs*float64(time.Second)) >= cut.At && strings.HasPrefix(rest, prefix) && strings.Contains(rest, " open to replica") {
				opened++
			}
		}
		if _, err := Simulate(cfg); err != nil {
			t.Fatal(err)
		}
		switch {
		case client == PerWorker && opened > 0:
			t.Errorf("%s: envoy %d opened %d streams after its cut at %v, want none", client, cut.Envoy, opened, cut.At)
		case client == Global && opened == 0:
			t.Errorf("%s: envoy %d opened no stream in the 12 s after its cut at %v, want it back at its next report", client, cut.Envoy, cut.At)
		}
	}
}
