package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testenv"
)

// referenceRules are loaded by every rate limit service measured: limits
// high enough that every decision counts the key and none is refused.
const referenceRules = `domain: bench
descriptors:
  - {key: k0, rate_limit: {unit: hour, requests_per_unit: 1000000000}}
  - {key: k1, rate_limit: {unit: hour, requests_per_unit: 1000000000}}
  - {key: k2, rate_limit: {unit: hour, requests_per_unit: 1000000000}}
  - {key: exact, rate_limit: {unit: hour, requests_per_unit: 10000}}
`

// rules are sluice's: the same, plus one rule per algorithm of sluice's
// extension (a peer's strict loader would reject them).
const rules = referenceRules + `  - {key: sw0, rate_limit: {unit: hour, requests_per_unit: 1000000000, algorithm: sliding_window}}
  - {key: tb0, rate_limit: {unit: hour, requests_per_unit: 1000000000, algorithm: token_bucket}}
  - {key: cold, rate_limit: {unit: minute, requests_per_unit: 1000000}}
  - {key: edge, rate_limit: {unit: second, requests_per_unit: 500}}
`

// row is one line of the result table.
type row struct {
	system   string
	backend  string
	w        workload
	res      loadResult
	baseline float64 // decisions/s of the no-op server at the same workload (median)
	rounds   int     // measurements this row is the median of
	cpuMs    float64 // server CPU ms per 1,000 decisions
	redisMs  float64
	allocs   float64 // server allocations per decision
	cmds     float64 // Redis commands per decision
	trips    float64 // Redis reads processed per decision ≈ round trips
	note     string
}

// run measures the workloads on every target (the no-op baseline, sluice on
// memory and Redis, and any -compare binary or peer), then the optional
// scale-out and OData parts, and prints the table (also to -out).
func run(ctx context.Context, f flags) error {
	if _, err := os.Stat(f.sluice); err != nil {
		return fmt.Errorf("sluice binary %s: %w (run make build)", f.sluice, err)
	}
	work, err := os.MkdirTemp("", "sluice-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	runtimeRoot := filepath.Join(work, "runtime")
	if err := writeRules(runtimeRoot, rules); err != nil {
		return err
	}
	peerRoot := filepath.Join(work, "runtime-peer")
	if err := writeRules(peerRoot, referenceRules); err != nil {
		return err
	}
	tb := testenv.NewProgramTB(work)
	defer tb.RunCleanups()

	workloads, driveFn, err := plan(f)
	if err != nil {
		return err
	}
	warmup := time.Second
	if f.quick {
		warmup = 500 * time.Millisecond
	}
	start := time.Now()

	var eng *engineResult
	if f.only == "" && f.main {
		log.Printf("engine alone (memory backend, in process)")
		eng = new(engineResult)
		if *eng, err = benchEngine(f.duration); err != nil {
			return err
		}
	}

	redis := testenv.StartRedis(tb, testenv.RedisOptions{})
	if err := tb.Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	rc := goredis.NewClient(&goredis.Options{Addr: redis.Addr})
	defer rc.Close()

	var rows []row
	var abTable string
	if f.main {
		targets := benchTargets(f, work, runtimeRoot, peerRoot, redis.Addr)
		samples, err := measureTargets(ctx, f, targets, workloads, rc, warmup, driveFn)
		if err != nil {
			return err
		}
		for _, byWorkload := range medians(samples) {
			rows = append(rows, byWorkload...)
		}
		abTable = renderAB(pairedRatios(targets, samples), abWarning(f))
	}
	sharedTables, err := sharedStores(ctx, tb, f, work, runtimeRoot, peerRoot, warmup, driveFn)
	if err != nil {
		return err
	}
	otherTables, err := otherSections(ctx, tb, f, work)
	if err != nil {
		return err
	}
	table := render(rows, eng, time.Since(start), f.driver) + "\n" + abTable + sharedTables + otherTables
	fmt.Print(table)
	if f.out != "" {
		if err := os.MkdirAll(filepath.Dir(f.out), 0o755); err != nil {
			return err
		}
		return os.WriteFile(f.out, []byte(table), 0o644)
	}
	return nil
}

// sharedStores runs the sections about counters shared between replicas,
// as the flags ask: replicas on one Redis and on a cluster (-scale-out),
// and quota leases with the store at a distance (-lease).
func sharedStores(ctx context.Context, tb *testenv.ProgramTB, f flags, work, runtimeRoot, peerRoot string, warmup time.Duration, driveFn driveFunc) (string, error) {
	var tables string
	if f.scaleOut {
		rows, err := scaleOut(ctx, tb, f.sluice, work, runtimeRoot, warmup, f.duration, driveFn)
		if err != nil {
			return "", fmt.Errorf("scale-out: %w", err)
		}
		tables += renderScaleOut(rows)
	}
	if f.lease {
		t, err := benchLease(ctx, tb, f, work, runtimeRoot, peerRoot, warmup, driveFn)
		if err != nil {
			return "", fmt.Errorf("lease: %w", err)
		}
		tables += t
	}
	return tables, nil
}

// otherSections runs the sections of other services, as the flags ask:
// the Rate Limit Quota Service (-rlqs) and the OData API (-odata).
func otherSections(ctx context.Context, tb *testenv.ProgramTB, f flags, work string) (string, error) {
	var tables string
	if f.rlqs {
		t, err := benchQuota(ctx, f, work)
		if err != nil {
			return "", fmt.Errorf("rlqs: %w", err)
		}
		tables += t
	}
	if f.odata {
		sz := odataSizes{rows: 2_000_000, pages: 200, passes: 10, clientPages: 50, codingRuns: 20}
		if f.quick {
			sz = odataSizes{rows: 200_000, pages: 20, passes: 3, clientPages: 5, codingRuns: 8}
		}
		t, err := benchOData(ctx, tb, f.sluice, work, sz)
		if err != nil {
			return "", fmt.Errorf("odata: %w", err)
		}
		tables += t
	}
	return tables, nil
}

// writeRules writes a service's rules where its RUNTIME_ROOT points
// (domain bench).
func writeRules(root, yaml string) error {
	if err := os.MkdirAll(filepath.Join(root, "bench", "config"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, "bench", "config", "bench.yaml"), []byte(yaml), 0o644)
}

// target is one rate limit service measured; redis says whether its
// decisions land in the bench's Redis (whose counters its rows report).
type target struct {
	system, backend string
	start           func() (*process, error)
	redis           bool
}

// benchTargets lists the services to measure, the no-op baseline first.
func benchTargets(f flags, work, runtimeRoot, peerRoot, redisAddr string) []target {
	targets := []target{
		{"no-op RLS (baseline)", "-", func() (*process, error) { return startNoop(work) }, false},
		{"sluice", "memory", func() (*process, error) {
			return startSluice(f.sluice, work, runtimeRoot, "memory", "")
		}, false},
		{"sluice", "redis", func() (*process, error) {
			return startSluice(f.sluice, work, runtimeRoot, "redis", redisAddr)
		}, true},
	}
	if f.compare != "" {
		name := "sluice@" + filepath.Base(f.compare)
		targets = append(targets,
			target{name, "memory", func() (*process, error) {
				return startSluice(f.compare, work, runtimeRoot, "memory", "")
			}, false},
			target{name, "redis", func() (*process, error) {
				return startSluice(f.compare, work, runtimeRoot, "redis", redisAddr)
			}, true})
	}
	if f.peerAddr != "" {
		targets = append(targets, target{"peer", "(as configured)", func() (*process, error) {
			return &process{name: "peer", addr: f.peerAddr}, nil
		}, true})
	}
	if f.peerCmd != "" {
		targets = append(targets, target{"peer", "redis", func() (*process, error) {
			return startPeer(f.peerCmd, f.peerEnv, work, peerRoot, redisAddr)
		}, true})
	}
	return targets
}

// measureTargets runs every workload on every target for f.rounds rounds
// and returns the samples: samples[i][k] are target i's rows of workload
// k, one per round.
//
// Every system runs from the start; a workload is measured on each in turn,
// the no-op first, so that a row and its baseline are seconds apart.
// Measured system by system instead, a drift of the machine between the
// no-op's turn and a system's would skew the ratios. An idle server costs
// the others nothing. The systems after the no-op change places every
// round (turnOrder): on a throttled VM the run right after another
// measured differently enough (8 % over 12 rounds, for two builds of the
// same server) to decide an A/B.
func measureTargets(ctx context.Context, f flags, targets []target, workloads []workload, rc *goredis.Client, warmup time.Duration, driveFn driveFunc) ([][][]row, error) {
	procs := make([]*process, len(targets))
	defer func() {
		for _, p := range procs {
			if p != nil {
				p.stop()
			}
		}
	}()
	for i, tg := range targets {
		var err error
		if procs[i], err = tg.start(); err != nil {
			return nil, fmt.Errorf("%s %s: %w", tg.system, tg.backend, err)
		}
	}
	// samples[i][k] are target i's rows of workload k, one per round.
	samples := make([][][]row, len(targets))
	for i := range samples {
		samples[i] = make([][]row, len(workloads))
	}
	for round := 0; round < f.rounds; round++ {
		for k, w := range workloads {
			for _, i := range turnOrder(len(targets), round) {
				tg := targets[i]
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if w.Algo != "" && i > 0 && !strings.HasPrefix(tg.system, "sluice") {
					continue // only sluice has the algorithms (the no-op ignores them)
				}
				var redisOf *goredis.Client // the Redis whose counters the row reports
				if tg.redis {
					_ = rc.FlushAll(ctx).Err()
					redisOf = rc
				}
				r, err := measure(procs[i], redisOf, w, warmup, f.duration, driveFn)
				if err != nil {
					return nil, fmt.Errorf("%s %s, %s: %w", tg.system, tg.backend, w, err)
				}
				r.system, r.backend = tg.system, tg.backend
				samples[i][k] = append(samples[i][k], r)
			}
		}
	}
	return samples, nil
}

// turnOrder is the order the targets take their turns in a round: the
// no-op (0) first, then the others rotated by the round.
func turnOrder(n, round int) []int {
	order := make([]int, 0, n)
	if n == 0 {
		return order
	}
	order = append(order, 0)
	for j := range n - 1 {
		order = append(order, 1+(j+round)%(n-1))
	}
	return order
}

// medians turns samples[i][k] (target i, workload k, one row per round)
// into each target's rows: the median by decisions/s of each workload, with
// the no-op's (target 0) median as its baseline.
func medians(samples [][][]row) [][]row {
	byTarget := make([][]row, len(samples))
	for k := range samples[0] {
		baseline := median(samples[0][k]).res.rate()
		for i := range samples {
			if len(samples[i][k]) == 0 {
				continue
			}
			r := median(samples[i][k])
			r.baseline = baseline
			r.rounds = len(samples[i][k])
			byTarget[i] = append(byTarget[i], r)
		}
	}
	return byTarget
}

func startNoop(work string) (*process, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dport, err := freePort()
	if err != nil {
		return nil, err
	}
	addr, debug := fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", dport)
	p, err := startProcess("noop", []string{self, "-noop-serve", addr, "-noop-debug", debug}, nil, addr, work)
	if err != nil {
		return nil, err
	}
	p.debug = debug
	return p, nil
}

// startSluice starts `sluice ratelimit` on bin with the bench rules, through
// the harness every program shares (testenv.StartSluice).
func startSluice(bin, work, runtimeRoot, backend, redisAddr string, extraEnv ...string) (*process, error) {
	cfg := testenv.DefaultSluiceConfig(runtimeRoot)
	cfg.Bin, cfg.Backend, cfg.RedisAddr = bin, backend, redisAddr
	cfg.Subdirectory, cfg.LogLevel = "bench", "error"
	cfg.LogPath = filepath.Join(work, fmt.Sprintf("sluice-%s-%d.log", backend, time.Now().UnixNano()))
	cfg.StartTimeout = 30 * time.Second
	cfg.Env = extraEnv
	s, err := testenv.StartSluice(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	return &process{name: "sluice-" + backend + "-" + s.GRPC, addr: s.GRPC, debug: s.Debug, p: s.Process}, nil
}

// startPeer runs another rate limit service with the same rules and Redis.
func startPeer(command, extra, work, runtimeRoot, redisAddr string) (*process, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	env := []string{
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(port), "USE_STATSD=false", "LOG_LEVEL=error",
		"RUNTIME_ROOT=" + runtimeRoot, "RUNTIME_SUBDIRECTORY=bench", "RUNTIME_WATCH_ROOT=false",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
	}
	for _, kv := range strings.Split(extra, ",") {
		if kv = strings.TrimSpace(kv); kv != "" {
			env = append(env, kv)
		}
	}
	return startProcess("peer", []string{"/bin/sh", "-c", command}, env, fmt.Sprintf("127.0.0.1:%d", port), work)
}

// plan is what the flags ask to measure: the -only workloads and the -driver.
func plan(f flags) ([]workload, driveFunc, error) {
	ws, err := benchWorkloads(f.only)
	if err != nil {
		return nil, nil, err
	}
	driveFn, err := driverNamed(f.driver)
	return ws, driveFn, err
}

// benchWorkloads are the rate limit workloads, those whose name contains
// only if it is not empty.
func benchWorkloads(only string) ([]workload, error) {
	var workloads []workload
	for _, callers := range []int{10, 50, 200} {
		for _, shape := range []struct{ keys, desc int }{{1000, 1}, {1, 1}, {1000, 3}} {
			workloads = append(workloads, workload{Callers: callers, Conns: 4, Keys: shape.keys, Descriptors: shape.desc})
		}
	}
	// The same load as the 200-caller, 1,000-key row, per algorithm; and
	// the hot key for the bucket, whose steps are never merged.
	workloads = append(workloads,
		workload{Callers: 200, Conns: 4, Keys: 1000, Descriptors: 1, Algo: "sliding_window"},
		workload{Callers: 200, Conns: 4, Keys: 1000, Descriptors: 1, Algo: "token_bucket"},
		workload{Callers: 200, Conns: 4, Keys: 1, Descriptors: 1, Algo: "token_bucket"},
	)
	if only == "" {
		return workloads, nil
	}
	kept := workloads[:0]
	for _, w := range workloads {
		if strings.Contains(w.String(), only) {
			kept = append(kept, w)
		}
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("-only %q matches no workload", only)
	}
	return kept, nil
}

// measure drives one workload and reads the process and Redis counters around it.
func measure(p *process, rc *goredis.Client, w workload, warmup, d time.Duration, driveFn driveFunc) (row, error) {
	log.Printf("%s: %s", p.name, w)
	var redisPID int
	var before redisCounters
	if rc != nil {
		redisPID = redisProcessID(rc)
	}
	// The counters are read after the warmup, inside drive's measured window
	// as closely as a separate process allows: start them at the warmup's end.
	type snap struct {
		cpu, rcpu float64
		mallocs   uint64
	}
	var s0 snap
	timer := time.AfterFunc(warmup, func() {
		s0.cpu, _ = testenv.CPUSeconds(p.pid())
		if rc != nil {
			before = readRedis(rc)
			s0.rcpu, _ = testenv.CPUSeconds(redisPID)
		}
		if p.debug != "" {
			s0.mallocs, _ = mallocs(p.debug)
		}
	})
	res, err := driveFn([]string{p.addr}, w, warmup, d)
	timer.Stop()
	if err != nil {
		return row{}, err
	}
	r := row{w: w, res: res}
	n := float64(max(res.Decisions, 1))
	if pid := p.pid(); pid > 0 {
		c1, _ := testenv.CPUSeconds(pid)
		r.cpuMs = (c1 - s0.cpu) * 1000 / n * 1000
	}
	if p.debug != "" {
		if m1, err := mallocs(p.debug); err == nil {
			r.allocs = float64(m1-s0.mallocs) / n
		}
	}
	if rc != nil {
		after := readRedis(rc)
		rc1, _ := testenv.CPUSeconds(redisPID)
		r.redisMs = (rc1 - s0.rcpu) * 1000 / n * 1000
		r.cmds = float64(after.commands-before.commands) / n
		r.trips = float64(after.reads-before.reads) / n
	}
	if res.Errors > 0 {
		r.note = "first error: " + res.FirstErr
	}
	return r, nil
}

// median is the sample of median decisions/s (the lower middle one of an
// even count): a whole measurement, so its figures belong together.
func median(rs []row) row {
	sorted := append([]row(nil), rs...)
	sort.Slice(sorted, func(a, b int) bool { return sorted[a].res.rate() < sorted[b].res.rate() })
	return sorted[(len(sorted)-1)/2]
}

type redisCounters struct{ commands, reads uint64 }

// readRedis sums commandstats calls (INFO itself excluded) and the reads the
// server processed, which count round trips: one per pipeline it receives.
func readRedis(rc *goredis.Client) redisCounters {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var c redisCounters
	info, err := rc.Info(ctx, "commandstats", "stats").Result()
	if err != nil {
		return c
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "cmdstat_"); ok && !strings.HasPrefix(rest, "info:") {
			if i := strings.Index(rest, "calls="); i >= 0 {
				v := rest[i+6:]
				if j := strings.IndexByte(v, ','); j >= 0 {
					v = v[:j]
				}
				n, _ := strconv.ParseUint(v, 10, 64)
				c.commands += n
			}
		}
		if v, ok := strings.CutPrefix(line, "total_reads_processed:"); ok {
			c.reads, _ = strconv.ParseUint(v, 10, 64)
		}
	}
	// This INFO call's own read is counted; it is noise at these volumes.
	return c
}

func redisProcessID(rc *goredis.Client) int {
	info, err := rc.Info(context.Background(), "server").Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
