package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/rlqssim"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/loadtest/internal/harness"
)

type options struct {
	bin, backend, server, clients, noAssign, arrivals, only string
	duration                                                time.Duration
	simulate                                                bool
	flood                                                   string
	// profile: where the flood saves the server's CPU profile and
	// goroutine dumps taken while it runs (empty: none).
	profile string
	// trace: with profile, an execution trace instead of the CPU profile.
	trace bool
	// probeProcess: the flood's probe and RLS caller run in a process of
	// their own (probes.go).
	probeProcess bool
	// pin: the flood's server and client on CPUs of their own (pin.go).
	pin pinning
	// repeat: how many times the flood runs, each on a sluice of its
	// own (floods.go).
	repeat int
}

func main() {
	harness.LogAs("rlqs")
	var o options
	flag.StringVar(&o.bin, "bin", "bin/sluice", "the sluice binary to run (each scenario starts its own replicas)")
	flag.StringVar(&o.backend, "backend", "memory", "memory or redis (redis: every replica on one redis-server)")
	flag.StringVar(&o.server, "server", "native", "sluice's gRPC server: native or grpc-go")
	flag.StringVar(&o.clients, "clients", "global", "Envoy clients to play: global,per-worker")
	flag.StringVar(&o.noAssign, "no-assignment", "allow", "no_assignment_behavior: allow,deny")
	flag.StringVar(&o.arrivals, "arrivals", "even", "request arrivals: even,poisson")
	flag.StringVar(&o.only, "only", "", "run only the scenarios whose name contains this")
	flag.DurationVar(&o.duration, "duration", 60*time.Second, "length of each scenario")
	flag.BoolVar(&o.simulate, "simulate", false, "run in simulated time against the quota service in process instead")
	flag.StringVar(&o.flood, "flood", "", "instead of the scenarios, flood one sluice beside a probe Envoy and an RLS caller, as a row of issue 43's table: STREAMSxBUCKETS new buckets at once (e.g. 1000x1000, 200x1000), unread (one stream sending reports of 1,000 new buckets for 15 s and never reading), streams:N (N concurrent streams, e.g. streams:10000) or big:N (N new buckets in 0.3 MB reports read by a default gRPC client, e.g. big:100000)")
	flag.BoolVar(&o.trace, "trace", false, "with -profile, save the server's execution trace of the flood's first 5 s (<profile>-<server>.trace, for go tool trace: where the probe's goroutines waited to run) instead of its CPU profile")
	flag.StringVar(&o.profile, "profile", "", "with -flood, save the server's CPU profile (<this>-<server>.pprof), goroutine dumps (<this>-<server>-goroutines-N.txt, one a second) and a heap profile at its peak RSS (<this>-<server>-heap.pprof) taken during the flood, and each probe's send time and latency (<this>-<server>-probes.txt)")
	flag.IntVar(&o.repeat, "repeat", 1, "with -flood, run it this many times, each on a new sluice, and print the distribution of the runs' worst probe answers (a flood's tail varies a lot from run to run: one run cannot compare two trees)")
	flag.BoolVar(&o.probeProcess, "probe-process", true, "with -flood, run the probe Envoy and the RLS caller in a process of their own, not among the flood's streams")
	pin := flag.String("pin", "", "with -flood, SERVER/CLIENT: run the server and the probe process on the CPUs SERVER (a taskset list), the flooding client on CLIENT, e.g. 1/0")
	var probeTarget string
	flag.StringVar(&probeTarget, "probe-target", "", "(used by -flood) be the probe process for the sluice at this gRPC address")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if probeTarget != "" {
		if err := probeChild(ctx, probeTarget); err != nil {
			fmt.Fprintf(os.Stderr, "probe process: %v\n", err)
			os.Exit(1)
		}
		return
	}
	var broken []string
	var err error
	if o.flood != "" {
		row, perr := parseFlood(o.flood)
		if perr != nil {
			harness.Verdict(nil, perr)
		}
		if o.pin, err = parsePin(*pin); err != nil {
			harness.Verdict(nil, err)
		}
		broken, err = floods(ctx, o, row)
		harness.Verdict(broken, err)
		return
	}
	broken, err = run(ctx, o)
	harness.Verdict(broken, err)
}

func run(ctx context.Context, o options) ([]string, error) {
	var broken []string
	for _, cname := range strings.Split(o.clients, ",") {
		client, err := rlqssim.ParseClient(cname)
		if err != nil {
			return nil, err
		}
		for _, na := range strings.Split(o.noAssign, ",") {
			s := rlqssim.Strategy{Kind: rlqssim.AllowAll}
			switch na {
			case "allow":
			case "deny":
				s.Kind = rlqssim.DenyAll
			default:
				return nil, fmt.Errorf("-no-assignment %q: want allow or deny", na)
			}
			for _, aname := range strings.Split(o.arrivals, ",") {
				arr := rlqssim.Even
				switch aname {
				case "even":
				case "poisson":
					arr = rlqssim.Poisson
				default:
					return nil, fmt.Errorf("-arrivals %q: want even or poisson", aname)
				}
				for _, sc := range rlqssim.Scenarios(client, s) {
					if o.only != "" && !strings.Contains(sc.Name, o.only) {
						continue
					}
					sc.Duration = o.duration
					name := fmt.Sprintf("%s/%s/%s/%s", cname, na, aname, sc.Name)
					line, ok, err := scenario(ctx, o, sc, arr)
					if err != nil {
						return broken, fmt.Errorf("%s: %w", name, err)
					}
					fmt.Println(rlqssim.Summary(name, line.v, line.lapses))
					printFailures(line.v.Failures)
					if !ok {
						broken = append(broken, name+": "+strings.Join(line.v.Failures, "; "))
					}
				}
			}
		}
	}
	return broken, nil
}

// printFailures prints the first failures of a run under its summary
// line: the promises are judged apart (ok), but a floor missed for use or
// fairness says which second.
func printFailures(failures []string) {
	const most = 5
	for i, f := range failures {
		if i == most {
			fmt.Printf("    … and %d more\n", len(failures)-most)
			break
		}
		fmt.Println("    " + f)
	}
}

type outcome struct {
	v      rlqssim.Verdict
	lapses int
}

// scenario runs one scenario and judges it: never over and never lapsing
// are promises (ok false when broken); use and fairness are printed.
func scenario(ctx context.Context, o options, sc rlqssim.Scenario, arr rlqssim.Arrivals) (outcome, bool, error) {
	c := sc.Criteria(arr)
	demand := func(e int, t time.Duration) float64 { return sc.Demand(e, 0, t) }
	if o.simulate {
		r, err := rlqssim.Simulate(sc.VConfig(arr, o.server == "native", 1))
		if err != nil {
			return outcome{}, false, err
		}
		var rls []uint64
		if len(r.RLS) > 0 {
			rls = r.RLS[0]
		}
		v := rlqssim.Judge(c, r.Admitted[0], rls, sc.RLSDemand(), demand, sc.FaultTimes())
		return outcome{v, r.Lapses}, v.Over == 0 && r.Lapses == 0, nil
	}
	// The live fleet counts per unix second from its start's: its last
	// second is cut short by the run's end, and row s begins up to a second
	// before s seconds into the run, so settling is a second longer.
	if c.Until == 0 || c.Until > sc.Duration {
		c.Until = sc.Duration
	}
	if c.OverUntil > 0 {
		c.OverUntil += time.Second
	}
	c.Settle += time.Second
	c.FaultSettle += time.Second
	return live(ctx, o, sc, arr, c, demand)
}

// live runs sc against real replicas of sluice.
func live(ctx context.Context, o options, sc rlqssim.Scenario, arr rlqssim.Arrivals, c rlqssim.Criteria,
	demand func(int, time.Duration) float64) (outcome, bool, error) {
	hs, err := harness.NewScenario("rlqs", o.bin, o.backend)
	if err != nil {
		return outcome{}, false, err
	}
	defer hs.Close()
	if sc.Replicas > 1 && o.backend == "memory" {
		return outcome{}, false, errors.New("several replicas share a limit only through a shared store: use -backend redis")
	}
	var replicas []*testenv.Sluice
	var configs []testenv.SluiceConfig
	var targets []string
	for i := range sc.Replicas {
		cfg := hs.Sluice
		cfg.RuntimeRoot = filepath.Join(hs.Work, fmt.Sprintf("runtime-%d", i))
		cfg.LogPath = filepath.Join(hs.Work, fmt.Sprintf("sluice-%d.log", i))
		cfg.Env = append(cfg.Env, "SLUICE_GRPC_SERVER="+o.server)
		if err := testenv.WriteRules(cfg, "rules.yaml", rlqssim.ScenarioRules); err != nil {
			return outcome{}, false, err
		}
		configs = append(configs, cfg)
		s, err := testenv.StartSluice(ctx, cfg)
		if err != nil {
			return outcome{}, false, err
		}
		defer s.Stop(10 * time.Second)
		replicas = append(replicas, s)
		targets = append(targets, s.GRPC)
	}
	envoys := make([]rlqssim.EnvoySpec, sc.Envoys)
	for i := range envoys {
		envoys[i] = rlqssim.EnvoySpec{Client: sc.Client, Workers: sc.Workers}
	}
	f, err := rlqssim.NewFleet(rlqssim.FleetConfig{Targets: targets, Domain: "q", Buckets: []map[string]string{{"user": "ann"}},
		Envoys: envoys, Demand: sc.Demand, Arrivals: arr, Seed: 1,
		Behaviors: rlqssim.Behaviors{NoAssignment: sc.NoAssignment, ReportingInterval: sc.ReportingInterval}})
	if err != nil {
		return outcome{}, false, err
	}
	rls := make([]uint64, int(sc.Duration/time.Second)+2)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		injectFaults(runCtx, f, sc, replicas, configs)
	}()
	rlsDone := make(chan struct{})
	go func() {
		defer close(rlsDone)
		for _, l := range sc.RLS {
			rlqssim.RunRLS(runCtx, targets[l.Replica], "q", l.Entries, l.Rate, func(at time.Time) {
				if s := int(at.Unix() - f.Start().Unix()); s >= 0 && s < len(rls) {
					rls[s]++
				}
			})
		}
	}()
	err = f.Run(ctx, sc.Duration)
	cancel()
	<-done
	<-rlsDone
	if err != nil {
		return outcome{}, false, err
	}
	var rlsRow []uint64
	if len(sc.RLS) > 0 {
		rlsRow = rls
	}
	v := rlqssim.Judge(c, f.Admitted(0), rlsRow, sc.RLSDemand(), demand, sc.FaultTimes())
	lapses, _ := f.Lapses()
	return outcome{v, lapses}, v.Over == 0 && lapses == 0, nil
}

// injectFaults does sc's faults at their times into the run of f, until
// ctx ends.
func injectFaults(ctx context.Context, f *rlqssim.Fleet, sc rlqssim.Scenario, replicas []*testenv.Sluice, configs []testenv.SluiceConfig) {
	for _, fl := range sc.Faults {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(f.Start().Add(fl.At))):
		}
		switch fl.Kind {
		case rlqssim.Cut:
			f.Cut(fl.Envoy)
		case rlqssim.Restart:
			f.Restart(fl.Envoy)
		case rlqssim.StopReplica:
			f.SetTargetDown(fl.Replica, true)
			_ = replicas[fl.Replica].Stop(10 * time.Second)
		case rlqssim.Reload:
			for _, cfg := range configs {
				_ = testenv.WriteRules(cfg, "rules.yaml", rlqssim.ScenarioRules+"\n")
			}
		}
	}
}
