package main

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testenv"
)

// leaseRow is one system at one store distance.
type leaseRow struct {
	rtt    time.Duration
	system string
	r      row
	base   row // the memory backend's row of the same round trip time
}

// leaseExact is one fleet's exactness with the store at a distance.
type leaseExact struct {
	fleet      string
	ok, failed int64
}

// leaseRTTs are the store distances measured: a store in another zone and
// one in another region.
var leaseRTTs = []time.Duration{time.Millisecond, 10 * time.Millisecond}

// leaseWarmup is the least warmup of the lease section's runs.
const leaseWarmup = 3 * time.Second

// benchLease measures what quota leases are for: decisions with the
// counter store a round trip away. At each distance (a TCP proxy that
// delays each direction by half of it, in front of a fresh Redis) it runs
// sluice on the memory backend (no store at all: the ceiling), exact and
// lease counting on the far Redis, and the -peer-cmd service if given, in
// turns, then the exactness of lease fleets.
func benchLease(ctx context.Context, tb *testenv.ProgramTB, f flags, work, runtimeRoot, peerRoot string, warmup time.Duration, driveFn driveFunc) (string, error) {
	w := workload{Callers: 50, Conns: 4, Keys: 1000, Descriptors: 1}
	// A lease learns each key's rate before its blocks fit it: the first
	// decision of every key waits for a reservation (as every exact one
	// does), and blocks grow at most 4× per reservation. The warmup covers
	// that for every system alike; the table measures the steady state.
	warmup = max(warmup, leaseWarmup)
	var rows []leaseRow
	var edges []edgeRow
	var exact []leaseExact
	for _, rtt := range leaseRTTs {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		redis := testenv.StartRedis(tb, testenv.RedisOptions{})
		if err := tb.Err(); err != nil {
			return "", err
		}
		far := testenv.StartLatencyProxy(tb, redis.Addr, rtt/2)
		if err := tb.Err(); err != nil {
			return "", err
		}
		rc := goredis.NewClient(&goredis.Options{Addr: redis.Addr})
		rs, err := leaseAt(f, work, runtimeRoot, peerRoot, far.Addr, rc, w, warmup, driveFn)
		if err != nil {
			rc.Close()
			return "", err
		}
		es, err := leaseEdges(f, work, runtimeRoot, far.Addr, rc, rtt, f.duration)
		rc.Close()
		if err != nil {
			return "", err
		}
		edges = append(edges, es...)
		for _, r := range rs {
			r.rtt = rtt
			rows = append(rows, r)
		}
		if rtt == time.Millisecond {
			if exact, err = leaseExactness(f, work, runtimeRoot, far.Addr); err != nil {
				return "", err
			}
		}
	}
	return renderLease(rows, exact) + renderEdges(edges), nil
}

// leaseAt measures every system with the store behind far, f.rounds times
// in turns, and returns each one's median.
func leaseAt(f flags, work, runtimeRoot, peerRoot, far string, rc *goredis.Client, w workload, warmup time.Duration, driveFn driveFunc) ([]leaseRow, error) {
	type sys struct {
		name  string
		rc    *goredis.Client
		start func() (*process, error)
	}
	systems := []sys{
		{"sluice, memory backend", nil, func() (*process, error) { return startSluice(f.sluice, work, runtimeRoot, "memory", "") }},
		{"sluice, exact counting", rc, func() (*process, error) {
			return startSluice(f.sluice, work, runtimeRoot, "redis", far, "SLUICE_COUNTING=exact")
		}},
		{"sluice, lease counting", rc, func() (*process, error) {
			return startSluice(f.sluice, work, runtimeRoot, "redis", far, "SLUICE_COUNTING=lease")
		}},
	}
	if f.peerCmd != "" {
		systems = append(systems, sys{"peer", rc, func() (*process, error) { return startPeer(f.peerCmd, f.peerEnv, work, peerRoot, far) }})
	}
	procs := make([]*process, len(systems))
	defer func() {
		for _, p := range procs {
			if p != nil {
				p.stop()
			}
		}
	}()
	for i, s := range systems {
		p, err := s.start()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		procs[i] = p
	}
	samples := make([][]row, len(systems))
	for round := 0; round < f.rounds; round++ {
		for i, s := range systems {
			log.Printf("lease: %s", s.name)
			r, err := measure(procs[i], s.rc, w, warmup, f.duration, driveFn)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
			samples[i] = append(samples[i], r)
		}
	}
	out := make([]leaseRow, len(systems))
	base := median(samples[0])
	for i, s := range systems {
		out[i] = leaseRow{system: s.name, r: median(samples[i]), base: base}
	}
	return out, nil
}

// leaseExactness starts fleets of three replicas on the store behind far
// and sends each exactTotal concurrent decisions on one fresh key with a
// limit of exactLimit: three lease replicas, then two lease and one exact.
func leaseExactness(f flags, work, runtimeRoot, far string) ([]leaseExact, error) {
	var out []leaseExact
	for _, fleet := range [][]string{{"lease", "lease", "lease"}, {"lease", "lease", "exact"}} {
		var procs []*process
		var addrs []string
		for _, mode := range fleet {
			p, err := startSluice(f.sluice, work, runtimeRoot, "redis", far, "SLUICE_COUNTING="+mode)
			if err != nil {
				for _, p := range procs {
					p.stop()
				}
				return nil, err
			}
			procs = append(procs, p)
			addrs = append(addrs, p.addr)
		}
		ok, failed, err := exactAcross(addrs, fmt.Sprintf("lease-%d", time.Now().UnixNano()))
		for _, p := range procs {
			p.stop()
		}
		if err != nil {
			return nil, err
		}
		out = append(out, leaseExact{fleet: strings.Join(fleet, " + "), ok: ok, failed: failed})
	}
	return out, nil
}

func renderLease(rows []leaseRow, exact []leaseExact) string {
	var b strings.Builder
	b.WriteString("### Quota leases: the counter store a round trip away\n\n")
	b.WriteString("| store round trip | system | workload | decisions/s | × memory backend | p50 | p50 − memory's | p99 | errors | Redis round trips/decision | server CPU ms/1k |\n")
	b.WriteString("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, lr := range rows {
		r := lr.r
		ratio := "-"
		if base := lr.base.res.rate(); base > 0 {
			ratio = fmt.Sprintf("%.2f", r.res.rate()/base)
		}
		diff := r.res.P50 - lr.base.res.P50
		sign := "+"
		if diff < 0 {
			sign, diff = "−", -diff
		}
		trips := num(r.trips, 4)
		if strings.Contains(lr.system, "memory") {
			trips = "(no store)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s%s | %s | %d | %s | %s |\n",
			lr.rtt, lr.system, r.w, fmtRate(r.res.rate()), ratio, fmtDur(r.res.P50), sign, fmtDur(diff),
			fmtDur(r.res.P99), r.res.Errors, trips, num(r.cpuMs, 1))
	}
	b.WriteString("\n| fleet (store 1 ms away) | OK of 20,000 concurrent decisions on a limit of 10,000 | errors | verdict |\n|---|---:|---:|---|\n")
	for _, e := range exact {
		verdict := "within 9,900 … 10,000"
		switch {
		case e.ok > exactLimit:
			verdict = "OVER THE LIMIT"
		case e.ok < exactLimit*99/100 || e.failed > 0:
			verdict = "below 9,900"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s |\n", e.fleet, e.ok, e.failed, verdict)
	}
	b.WriteString("\nThe store is a fresh Redis behind a TCP proxy that delays each direction by half the round trip. " +
		"Memory backend: one sluice with no store (the ceiling). Exact counting asks the store on every decision, as envoyproxy/ratelimit does; " +
		"lease counting (SLUICE_COUNTING=lease) answers from blocks of hits it reserved ahead. The limits (10⁹ an hour) are never reached. " +
		"Every run starts after a warmup of at least 3 s on a fresh process: cold, each key's first decision waits for a reservation, as every exact decision does. " +
		"Round trips are the pipelines Redis read per decision (INFO total_reads_processed), health checks included.\n\n")
	return b.String()
}
