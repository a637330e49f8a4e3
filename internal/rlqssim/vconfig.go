package rlqssim

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/quota"
)

// Arrivals is how an Envoy's requests are spread in time.
type Arrivals int

func (a Arrivals) String() string {
	if a == Poisson {
		return "poisson"
	}
	return "even"
}

// EnvoySpec is one simulated Envoy.
type EnvoySpec struct {
	Client Client
	// Workers is a per-worker Envoy's worker threads, each with its own
	// filter and stream (requests spread over them); 1 otherwise.
	Workers int
}

// FaultKind is what a Fault does.
type FaultKind int

// Fault is something that happens during a run; Envoy -1 is all of them.
type Fault struct {
	At      time.Duration
	Kind    FaultKind
	Envoy   int
	Replica int
}

// RLSLoad is a steady stream of RLS decisions on one replica.
type RLSLoad struct {
	Rate    float64
	Replica int
	Entries []engine.Entry
}

// VConfig is a fleet run in simulated time against sluice's quota service
// itself (quota.Service without goroutines, on the memory backend with the
// simulated clock), so that a run of a minute takes well under a second
// and its outcome does not depend on how busy the machine is.
type VConfig struct {
	Rules   string // the YAML of Domain's rules
	Domain  string
	Buckets []map[string]string
	// Replicas share one store (and, unless NoBoard, their claims).
	Replicas int
	NoBoard  bool
	Quota    quota.Options
	Envoys   []EnvoySpec
	Demand   Demand
	Arrivals Arrivals
	Seed     uint64
	Behaviors
	// Delay is the one-way network delay at most; each message takes
	// between half of it and all of it.
	Delay time.Duration
	// Acks: the transport acknowledges what it wrote (an HTTP/2 PING
	// behind it, as sluice's native server does; grpc-go's does not).
	Acks     bool
	Duration time.Duration
	// Step is the simulation's resolution (1 ms by default).
	Step   time.Duration
	Faults []Fault
	RLS    []RLSLoad
	// Trace, when set, is told what happens.
	Trace func(format string, args ...any)
}

// VRun is the outcome of a simulated run: per bucket, Envoy and second of
// the run, what was admitted and denied; per RLS load and second, what it
// admitted.
type VRun struct {
	Start    time.Time // a unix second: second k of the run is window Start+k
	Seconds  int
	Admitted [][][]uint64 // [bucket][envoy][second]
	Denied   [][][]uint64
	RLS      [][]uint64 // [load][second]
	// Lapses counts assignments that ended without a renewal while their
	// Envoy's stream was healthy (open for more than a report period and
	// the replica up); AllLapses every one.
	Lapses, AllLapses int
	LapseLog          []string
	Stats             VStats
	// Service are each replica's quota statistics at the end.
	Service []map[string]uint64
}

// VStats counts what the fleet did.
type VStats struct {
	Streams, Reports, Subscriptions, Dropped, Actions, Ignored int
}

func (c *VConfig) validate() error {
	switch {
	case c.Replicas < 1:
		return errors.New("rlqssim: at least one replica")
	case len(c.Envoys) == 0:
		return errors.New("rlqssim: no Envoys")
	case len(c.Buckets) == 0:
		return errors.New("rlqssim: no buckets")
	case c.Demand == nil:
		return errors.New("rlqssim: no demand")
	case c.Duration < time.Second:
		return fmt.Errorf("rlqssim: duration %v, want at least a second", c.Duration)
	case c.Delay < 0:
		return errors.New("rlqssim: negative delay")
	}
	if c.Step == 0 {
		c.Step = time.Millisecond
	}
	if c.Quota.Alloc.ReportPeriod == 0 {
		c.Quota = quota.DefaultOptions()
	}
	for _, f := range c.Faults {
		if f.Kind == StopReplica && (f.Replica < 0 || f.Replica >= c.Replicas) {
			return fmt.Errorf("rlqssim: no replica %d to stop", f.Replica)
		}
	}
	return c.Behaviors.Validate()
}

const (
	// Even arrivals: one request every 1/rate.
	Even Arrivals = iota
	// Poisson arrivals: independent, exponential gaps of mean 1/rate.
	Poisson
)

const (
	// Cut ends an Envoy's streams, as a network failure would: it keeps
	// its buckets, and reopens at its next report timer (the per-worker
	// client: at its next new bucket only).
	Cut FaultKind = iota
	// Restart drops everything an Envoy holds, as a new process has
	// nothing; its streams end.
	Restart
	// StopReplica stops a replica gracefully (SIGTERM): its streams end
	// UNAVAILABLE, it gives back what it holds beyond what its Envoys may
	// spend until they reach another replica, and it is gone.
	StopReplica
	// Reload loads the rules again (the same ones: a new config).
	Reload
)
