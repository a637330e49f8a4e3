package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	sim "github.com/sluicehq/sluice/internal/rlqssim"
)

type options struct {
	targets, domain, buckets, pattern, split string
	noAssign, expired, cuts, restarts        string
	envoys, shiftEvery                       int
	interval, duration, idleAt, expiredFor   time.Duration
	demand, limit, minFleet, minShare        float64
	settle                                   int
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("rlqs: ")
	var o options
	flag.StringVar(&o.targets, "targets", "127.0.0.1:8081", "RLQS servers, comma separated (round robin)")
	flag.StringVar(&o.domain, "domain", "example", "the filter's domain")
	flag.StringVar(&o.buckets, "buckets", "user=ann", "BucketIds: key=value[,key=value] separated by ';'")
	flag.IntVar(&o.envoys, "envoys", 10, "simulated Envoys")
	flag.DurationVar(&o.interval, "interval", time.Second, "reporting_interval")
	flag.DurationVar(&o.duration, "duration", 30*time.Second, "length of the run")
	flag.Float64Var(&o.demand, "demand", 3000, "total demand per bucket, requests per second")
	flag.StringVar(&o.pattern, "pattern", "skewed", "skewed or spread")
	flag.StringVar(&o.split, "split", "70:1,20:2,10:7", "skewed: share:envoys groups, in Envoy order")
	flag.IntVar(&o.shiftEvery, "shift-every", 0, "move the heavy Envoy one along every this many intervals (0: never)")
	flag.DurationVar(&o.idleAt, "idle-at", 0, "the heaviest Envoy goes idle at this time into the run (0: never)")
	flag.StringVar(&o.noAssign, "no-assignment", "allow", "no_assignment_behavior: allow, deny or tb:max:per_fill:fill_seconds")
	flag.StringVar(&o.expired, "expired", "none", "expired_assignment_behavior: none, reuse, allow, deny or tb:…")
	flag.DurationVar(&o.expiredFor, "expired-timeout", 0, "expired_assignment_behavior_timeout")
	flag.StringVar(&o.cuts, "cut", "", "cut streams: envoy@time,…")
	flag.StringVar(&o.restarts, "restart", "", "restart Envoys: envoy@time,…")
	flag.Float64Var(&o.limit, "limit", 0, "the first bucket's limit per second; judge the run against it (0: no check)")
	flag.Float64Var(&o.minFleet, "min-fleet", 0.95, "lowest fleet admission, as a fraction of min(limit, demand)")
	flag.Float64Var(&o.minShare, "min-share", 0.9, "lowest admission of an Envoy, as a fraction of its fair share")
	flag.IntVar(&o.settle, "settle", 2, "intervals after a demand change before seconds are judged")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	broken, err := run(ctx, o)
	if err != nil {
		log.Fatal(err)
	}
	for _, b := range broken {
		fmt.Println("BROKEN:", b)
	}
	if len(broken) > 0 {
		os.Exit(1)
	}
	fmt.Println("PASS")
}

func run(ctx context.Context, o options) ([]string, error) {
	cfg, heaviest, err := config(o)
	if err != nil {
		return nil, err
	}
	s, err := sim.New(cfg)
	if err != nil {
		return nil, err
	}
	faults, err := schedule(s, o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var runErr error
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		runErr = s.Run(ctx, o.duration)
	}()
	go faults(ctx)
	printIntervals(s, cfg, finished)
	if runErr != nil {
		return nil, runErr
	}
	fmt.Printf("stats: %+v\n", s.Stats())
	if o.idleAt > 0 {
		fmt.Printf("Envoy %d went idle at %v\n", heaviest, o.idleAt)
	}
	if o.limit <= 0 {
		return nil, nil
	}
	v, err := s.Check(sim.Criteria{Bucket: 0, Limit: o.limit, Settle: time.Duration(o.settle) * o.interval,
		MinFleet: o.minFleet, MinShare: o.minShare})
	if err != nil {
		return nil, err
	}
	fmt.Printf("judged %d seconds; fleet admitted %d..%d per second (limit %v)\n", v.Judged, v.FleetMin, v.FleetMax, o.limit)
	if v.Judged == 0 {
		return []string{"no second was judged: the run is shorter than the settle time"}, nil
	}
	return v.Failures, nil
}

// config builds the simulator's configuration from the flags, and names
// the Envoy that -idle-at idles (the heaviest at the start).
func config(o options) (sim.Config, int, error) {
	cfg := sim.Config{Targets: strings.Split(o.targets, ","), Domain: o.domain, Envoys: o.envoys, Interval: o.interval}
	for _, b := range strings.Split(o.buckets, ";") {
		m := map[string]string{}
		for _, kv := range strings.Split(b, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return cfg, 0, fmt.Errorf("-buckets: %q is not key=value", kv)
			}
			m[k] = v
		}
		cfg.Buckets = append(cfg.Buckets, m)
	}
	var err error
	switch o.pattern {
	case "spread":
		cfg.Demand = sim.Spread(o.demand, o.envoys)
	case "skewed":
		var groups []sim.Group
		for _, g := range strings.Split(o.split, ",") {
			share, n, ok := strings.Cut(g, ":")
			sh, err1 := strconv.ParseFloat(share, 64)
			cnt, err2 := strconv.Atoi(n)
			if !ok || err1 != nil || err2 != nil {
				return cfg, 0, fmt.Errorf("-split: %q is not share:envoys", g)
			}
			groups = append(groups, sim.Group{Envoys: cnt, Share: sh})
		}
		if cfg.Demand, err = sim.Skewed(o.demand, groups); err != nil {
			return cfg, 0, err
		}
	default:
		return cfg, 0, fmt.Errorf("-pattern %q: want skewed or spread", o.pattern)
	}
	if o.shiftEvery > 0 {
		cfg.Demand = sim.Shifting(cfg.Demand, o.envoys, time.Duration(o.shiftEvery)*o.interval)
	}
	heaviest := 0
	for e := range o.envoys {
		if cfg.Demand(e, 0, o.idleAt) > cfg.Demand(heaviest, 0, o.idleAt) {
			heaviest = e
		}
	}
	if o.idleAt > 0 {
		cfg.Demand = sim.IdleAt(cfg.Demand, heaviest, o.idleAt)
	}
	if cfg.NoAssignment, err = strategy(o.noAssign); err != nil {
		return cfg, 0, fmt.Errorf("-no-assignment: %w", err)
	}
	switch o.expired {
	case "none":
	case "reuse":
		cfg.Expired = &sim.ExpiredBehavior{Timeout: o.expiredFor}
	default:
		fb, err := strategy(o.expired)
		if err != nil {
			return cfg, 0, fmt.Errorf("-expired: %w", err)
		}
		cfg.Expired = &sim.ExpiredBehavior{Fallback: &fb, Timeout: o.expiredFor}
	}
	if o.duration <= 0 || o.settle < 0 {
		return cfg, 0, errors.New("-duration must be positive and -settle not negative")
	}
	return cfg, heaviest, nil
}

// strategy reads allow, deny or tb:max:per_fill:fill_seconds.
func strategy(s string) (sim.Strategy, error) {
	switch s {
	case "allow":
		return sim.Strategy{Kind: sim.AllowAll}, nil
	case "deny":
		return sim.Strategy{Kind: sim.DenyAll}, nil
	}
	f := strings.Split(s, ":")
	if len(f) != 4 || f[0] != "tb" {
		return sim.Strategy{}, fmt.Errorf("%q: want allow, deny or tb:max:per_fill:fill_seconds", s)
	}
	var n [3]uint64
	for i := range n {
		v, err := strconv.ParseUint(f[i+1], 10, 32)
		if err != nil {
			return sim.Strategy{}, fmt.Errorf("%q: %w", s, err)
		}
		n[i] = v
	}
	st := sim.Strategy{Kind: sim.TokenBucket, MaxTokens: uint32(n[0]), TokensPerFill: uint32(n[1]), FillInterval: time.Duration(n[2]) * time.Second}
	return st, st.Validate()
}

type fault struct {
	envoy   int
	at      time.Duration
	restart bool
}

// schedule reads -cut and -restart and returns the loop that applies them
// on time until ctx ends.
func schedule(s *sim.Sim, o options) (func(context.Context), error) {
	var fs []fault
	for _, l := range []struct {
		list    string
		restart bool
	}{{o.cuts, false}, {o.restarts, true}} {
		for _, f := range strings.Split(l.list, ",") {
			if f == "" {
				continue
			}
			e, at, ok := strings.Cut(f, "@")
			n, err1 := strconv.Atoi(e)
			d, err2 := time.ParseDuration(at)
			if !ok || err1 != nil || err2 != nil || n < 0 || n >= o.envoys {
				return nil, fmt.Errorf("fault %q: want envoy@duration with envoy below %d", f, o.envoys)
			}
			fs = append(fs, fault{n, d, l.restart})
		}
	}
	return func(ctx context.Context) {
		start := time.Now()
		for _, f := range fs {
			go func() {
				t := time.NewTimer(time.Until(start.Add(f.at)))
				defer t.Stop()
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				if f.restart {
					fmt.Printf("%v: restart Envoy %d\n", f.at, f.envoy)
					_ = s.Restart(f.envoy)
				} else {
					fmt.Printf("%v: cut Envoy %d's stream\n", f.at, f.envoy)
					_ = s.Cut(f.envoy)
				}
			}()
		}
	}, nil
}

// printIntervals prints, every reporting interval until the run ends, the
// rates admitted in it: per bucket for the fleet, and per Envoy.
func printIntervals(s *sim.Sim, cfg sim.Config, finished <-chan struct{}) {
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	prev := make([][2]uint64, cfg.Envoys*len(cfg.Buckets))
	last, n := time.Now(), 0
	for {
		select {
		case <-finished:
			return
		case <-t.C:
		}
		now := time.Now()
		el := now.Sub(last).Seconds()
		last = now
		n++
		for b := range cfg.Buckets {
			var fleet, denied float64
			per := make([]string, cfg.Envoys)
			for e := range cfg.Envoys {
				a, d := s.Totals(e, b)
				p := &prev[e*len(cfg.Buckets)+b]
				ra := float64(a-p[0]) / el
				fleet += ra
				denied += float64(d-p[1]) / el
				per[e] = fmt.Sprintf("%.0f", ra)
				*p = [2]uint64{a, d}
			}
			fmt.Printf("interval %d bucket %v: fleet %.0f/s admitted, %.0f/s denied; per Envoy %s\n",
				n, cfg.Buckets[b], fleet, denied, strings.Join(per, " "))
		}
	}
}
