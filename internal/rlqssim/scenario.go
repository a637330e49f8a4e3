package rlqssim

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// ScenarioRules are the rules every scenario runs against: one bucket of
// user=ann at 1,000 per second.
const ScenarioRules = `domain: q
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000}
`

// ScenarioLimit is ScenarioRules' limit per second.
const ScenarioLimit = 1000

// Scenario is one situation the quota service must hold in: a fleet, its
// demand, what happens during the run, and how it is judged. The same
// scenarios run in simulated time (Sim) and against real servers
// (loadtest/rlqs).
type Scenario struct {
	Name string
	// Client and Workers are every Envoy's (per-worker Envoys report
	// every ReportingInterval).
	Client            Client
	Workers           int
	ReportingInterval time.Duration
	Envoys            int
	Demand            Demand
	NoAssignment      Strategy
	Replicas          int
	Faults            []Fault
	RLS               []RLSLoad
	Duration          time.Duration
	// Settle and FaultSettle are how long after a change of demand (or the
	// start) and after a fault the use and fairness are not judged.
	Settle, FaultSettle time.Duration
}

// Period is how often the scenario's Envoys report.
func (sc Scenario) Period() time.Duration {
	if sc.Client == PerWorker {
		return sc.ReportingInterval
	}
	return GlobalReportPeriod
}

// skewed is the fleet: 10 Envoys, 3,000/s split 70/20/10 (one at
// 2,100, two at 300, seven at about 43).
func skewed() Demand {
	d, err := Skewed(3000, []Group{{Envoys: 1, Share: 70}, {Envoys: 2, Share: 20}, {Envoys: 7, Share: 10}})
	if err != nil {
		panic(err) // the groups above are valid
	}
	return d
}

// Scenarios are the rows, for a client (Global: the newest,
// reporting every 5 s; PerWorker: reporting every second) and a
// no_assignment_behavior.
func Scenarios(client Client, noAssign Strategy) []Scenario {
	base := Scenario{Client: client, Envoys: 10, NoAssignment: noAssign, Replicas: 1, Duration: 60 * time.Second}
	if client == PerWorker {
		base.Workers, base.ReportingInterval = 1, time.Second
	}
	p := base.Period()
	base.Settle = 2 * p
	base.FaultSettle = p + base.ttl()
	d := skewed()
	// The heaviest Envoy goes idle at 30 s: its share moves to the others.
	shift := IdleAt(d, 0, 30*time.Second)
	mk := func(name string, fn func(*Scenario)) Scenario {
		sc := base
		sc.Name = name
		sc.Demand = shift
		fn(&sc)
		return sc
	}
	return []Scenario{
		mk("skewed, demand shift", func(*Scenario) {}),
		mk("an Envoy restarted", func(sc *Scenario) {
			sc.Demand = d
			sc.Faults = []Fault{{At: 20 * time.Second, Kind: Restart, Envoy: 1}}
		}),
		mk("stream cuts", func(sc *Scenario) {
			sc.Demand = d
			sc.Faults = []Fault{{At: 15 * time.Second, Kind: Cut, Envoy: 0}, {At: 25 * time.Second, Kind: Cut, Envoy: 4},
				{At: 35 * time.Second, Kind: Cut, Envoy: 1}}
		}),
		mk("whole fleet restarted", func(sc *Scenario) {
			sc.Demand = d
			sc.Faults = []Fault{{At: 25 * time.Second, Kind: Restart, Envoy: -1}}
		}),
		mk("reload", func(sc *Scenario) {
			sc.Demand = d
			sc.Faults = []Fault{{At: 20 * time.Second, Kind: Reload}}
		}),
		mk("two replicas, RLS callers, one stopped", func(sc *Scenario) {
			sc.Replicas = 2
			sc.Demand = d
			sc.RLS = []RLSLoad{{Rate: 300, Replica: 0, Entries: []engine.Entry{{Key: "user", Value: "ann"}}}}
			sc.Faults = []Fault{{At: 20 * time.Second, Kind: Cut, Envoy: 3}, {At: 35 * time.Second, Kind: StopReplica, Replica: 1}}
		}),
		mk("three replicas, shift", func(sc *Scenario) {
			sc.Replicas = 3
		}),
	}
}

// ttl is the assignment TTL the service gives the scenario's Envoys.
func (sc Scenario) ttl() time.Duration {
	p := sc.Period()
	renew := min(max(p/4, 500*time.Millisecond), 2*time.Second)
	if sc.Client == PerWorker {
		renew = max(p, 500*time.Millisecond)
	}
	return (p + renew + 550*time.Millisecond + time.Second - 1).Truncate(time.Second)
}

// VConfig is the scenario for the simulation.
func (sc Scenario) VConfig(arr Arrivals, acks bool, seed uint64) VConfig {
	envoys := make([]EnvoySpec, sc.Envoys)
	for i := range envoys {
		envoys[i] = EnvoySpec{Client: sc.Client, Workers: sc.Workers}
	}
	return VConfig{Rules: ScenarioRules, Domain: "q", Buckets: []map[string]string{{"user": "ann"}}, Replicas: sc.Replicas,
		Envoys: envoys, Demand: sc.Demand, Arrivals: arr, Seed: seed,
		Behaviors: Behaviors{NoAssignment: sc.NoAssignment, ReportingInterval: sc.ReportingInterval},
		Delay:     2 * time.Millisecond, Acks: acks, Duration: sc.Duration, Faults: sc.Faults, RLS: sc.RLS}
}

// Criteria are what the scenario is judged by: never over; outside the
// settling times, on average at least 0.9 of the limit (of the demand,
// when less) with even arrivals and 0.85 with Poisson ones; and floors
// for single seconds and for every Envoy's share of its max-min fair
// share. Use is judged per second with even arrivals and per report
// period with Poisson ones (a second's random arrivals are not the
// server's doing).
//
// Poisson arrivals cost what no server can avoid: each Envoy's bucket
// holds tokens no other Envoy may spend, and a random arrival stream
// overflows or empties it now and then. For this fleet no assignment of
// token buckets that holds every window gives every Envoy 0.95 of its fair
// share, and giving each 0.9 leaves the fleet at most about 0.92 of the
// limit (Ceiling, TestCeilingOfTheScenarioFleet). The floors sit a few
// per cent under the measured figures (docs/rlqs.md), which the simulation
// reproduces exactly for a seed: a change that loses use fails here. Two
// or three replicas dip lower in single seconds while streams move.
func (sc Scenario) Criteria(arr Arrivals) Criteria {
	c := Criteria{Limit: ScenarioLimit, Settle: sc.Settle, FaultSettle: sc.FaultSettle, MinMean: 0.9, MinFleet: 0.87, MinShare: 0.8}
	if sc.Replicas > 1 {
		c.MinFleet = 0.7
	}
	if arr == Poisson {
		c.Smooth = sc.Period()
		c.MinMean, c.MinFleet, c.MinShare = 0.85, 0.77, 0.7
		if sc.Replicas > 1 {
			c.MinFleet = 0.7
		}
	}
	if sc.Client != PerWorker {
		return c
	}
	// The per-worker client never reopens a stream that was cut or that a
	// stopped replica ended: its timer sends only on an open stream, and
	// only a new bucket's first request opens one (client_impl.cc,
	// filter.cc). Its assignments then run to their TTL and it falls to
	// no_assignment_behavior for good: ALLOW_ALL admits everything,
	// DENY_ALL nothing, and no server can reach it. So from the first
	// such fault its use is not judged (even arrivals: 0.887-0.900 of
	// the limit over the 13-18 seconds before it, start included), and
	// under ALLOW_ALL nor is the limit after the report period the
	// service keeps every assignment ahead of its TTL.
	for _, f := range sc.Faults {
		if f.Kind != Cut && f.Kind != StopReplica {
			continue
		}
		c.Until = f.At
		if arr == Even {
			c.MinMean = 0.87
		}
		if sc.NoAssignment.Kind == AllowAll {
			c.OverUntil = f.At + sc.Period()
		}
		break
	}
	// Every renewal hands the per-worker client a new full bucket, one a
	// window at a report period of a second: its tokens are paid twice.
	// With Poisson arrivals no server renewing it so can use more than
	// about 0.87 of the limit while giving each Envoy 0.85 of its fair
	// share, nor give each 0.9 (TestCeilingOfTheScenarioFleet). Measured
	// (before the simulation played its reports' time_elapsed as Envoy
	// sends it, the service took these Envoys for the newest client):
	// even arrivals, seconds from 853 (one replica) and 651 (three, the
	// second second, without acknowledgements); Poisson, mean use
	// 0.813-0.846, seconds from 745 (one replica) and 648 (three), worst
	// share 0.67-0.81.
	switch {
	case arr == Poisson:
		c.MinMean, c.MinFleet, c.MinShare = 0.8, 0.7, 0.65
	case sc.Replicas == 1:
		c.MinFleet = 0.83
	}
	if sc.Replicas > 1 {
		c.MinFleet = 0.6
	}
	return c
}

// FaultTimes are the scenario's faults' moments.
func (sc Scenario) FaultTimes() []time.Duration {
	var out []time.Duration
	for _, f := range sc.Faults {
		out = append(out, f.At)
	}
	return out
}

// RLSDemand is what the scenario's RLS callers ask for, per second.
func (sc Scenario) RLSDemand() float64 {
	d := 0.0
	for _, l := range sc.RLS {
		d += l.Rate
	}
	return d
}

// Summary is one line about a judged run.
func Summary(name string, v Verdict, lapses int) string {
	state := "PASS"
	if len(v.Failures) > 0 || lapses > 0 {
		state = "FAIL"
	}
	return fmt.Sprintf("%-40s %s: %d windows, %d over (by %.0f at most); %d seconds judged, fleet %.0f..%.0f (mean %.0f, use %.3f); worst share %.2f; %d lapses",
		name, state, v.Windows, v.Over, v.MaxOver, v.Judged, v.FleetMin, v.FleetMax, v.FleetMean, v.Use, v.Worst, lapses)
}
