package main

import (
	"context"
	"fmt"
	"log"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/testenv"
)

// The edges of quota leases, beside exact counting on the same store: a
// burst of keys never seen before, and decisions in the last round trips
// of a full fixed window (issue 40). Rules "cold" and "edge" (see rules).
const (
	coldKeys    = 10000 // new keys in a burst
	coldCallers = 500
	edgeCallers = 50
	edgeValues  = 5   // descriptor values of the edge rule, each over its limit
	edgeLimit   = 500 // per second, per value: under the demand, so windows fill
	edgeConns   = 4
)

// edgeRow is one counting mode's figures with the store at one distance,
// the medians of the rounds.
type edgeRow struct {
	rtt  time.Duration
	mode string
	// cold is the burst's wall time; coldRatio its ratio to exact mode's in
	// the same round (median), coldAll every round's ratio.
	cold       time.Duration
	coldRatio  float64
	coldAll    []float64
	coldWrites float64 // INCRBYs per decision in the burst
	// coldCPU is the server's CPU ms per 1,000 decisions of the burst (its
	// cost, which a loaded machine's scheduling moves less than wall time).
	coldCPU float64
	// The window-end run: p99 of the decisions sent in the last two round
	// trips of a window, how many there were, and INCRBYs per decision of
	// the whole run.
	endP99    time.Duration
	endN      int
	errors    uint64
	endWrites float64
	// endP50, and the p99 of the decisions sent elsewhere in the window
	// (midP99): a window-end p99 near it is the machine's, not the edge's.
	endP50, midP99 time.Duration
}

// edgeRound is one measurement of one mode.
type edgeRound struct {
	cold                  time.Duration
	coldWrites, endWrites float64
	coldCPU               float64
	endP99                time.Duration
	endP50, midP99        time.Duration
	endN                  int
	errors                uint64
}

// leaseEdges measures exact and lease counting on the store behind far,
// f.rounds times in turns (each on a fresh process), and returns their
// rows, exact first.
func leaseEdges(f flags, work, runtimeRoot, far string, rc *goredis.Client, rtt, d time.Duration) ([]edgeRow, error) {
	modes := []string{"exact", "lease"}
	rounds := make([][]edgeRound, len(modes))
	for round := 0; round < f.rounds; round++ {
		for i, mode := range modes {
			log.Printf("lease edges: %s counting, store %v away, round %d", mode, rtt, round+1)
			p, err := startSluice(f.sluice, work, runtimeRoot, "redis", far, "SLUICE_COUNTING="+mode)
			if err != nil {
				return nil, err
			}
			r, err := edgeOnce(p, rc, fmt.Sprintf("%s-%d-%d", mode, rtt.Milliseconds(), round), rtt, d)
			p.stop()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", mode, err)
			}
			rounds[i] = append(rounds[i], r)
		}
	}
	out := make([]edgeRow, len(modes))
	for i, mode := range modes {
		rs := rounds[i]
		row := edgeRow{rtt: rtt, mode: mode}
		var colds, p99s, p50s, mids []time.Duration
		var cw, ew, cc []float64
		for k, r := range rs {
			colds = append(colds, r.cold)
			p99s = append(p99s, r.endP99)
			p50s = append(p50s, r.endP50)
			mids = append(mids, r.midP99)
			cw = append(cw, r.coldWrites)
			cc = append(cc, r.coldCPU)
			ew = append(ew, r.endWrites)
			row.coldAll = append(row.coldAll, r.cold.Seconds()/rounds[0][k].cold.Seconds())
			row.endN += r.endN
			row.errors += r.errors
		}
		row.cold, row.endP99 = medianDur(colds), medianDur(p99s)
		row.endP50, row.midP99 = medianDur(p50s), medianDur(mids)
		row.coldWrites, row.endWrites = medianFloat(cw), medianFloat(ew)
		row.coldCPU = medianFloat(cc)
		row.coldRatio = medianFloat(append([]float64(nil), row.coldAll...))
		out[i] = row
	}
	return out, nil
}

// edgeOnce runs the cold burst, then the window-end run, on one process.
func edgeOnce(p *process, rc *goredis.Client, tag string, rtt, d time.Duration) (edgeRound, error) {
	addr := p.addr
	conns := make([]*grpc.ClientConn, edgeConns)
	for i := range conns {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return edgeRound{}, err
		}
		defer c.Close()
		conns[i] = c
	}
	var r edgeRound
	w0 := redisCalls(rc, "incrby")
	cpu0, _ := testenv.CPUSeconds(p.pid())
	took, errs := coldBurst(conns, tag)
	cpu1, _ := testenv.CPUSeconds(p.pid())
	r.cold, r.errors = took, errs
	r.coldCPU = (cpu1 - cpu0) * 1000 / coldKeys * 1000
	r.coldWrites = float64(redisCalls(rc, "incrby")-w0) / coldKeys
	// The window-end run starts at a window's start, so that every window
	// it measures is whole.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	w0 = redisCalls(rc, "incrby")
	lat, mid, n, errs := windowEnds(conns, tag, rtt, d)
	r.endWrites = float64(redisCalls(rc, "incrby")-w0) / float64(max(n, 1))
	r.errors += errs
	r.endN = len(lat)
	r.endP99, r.endP50 = percentile(lat, 0.99), percentile(lat, 0.5)
	r.midP99 = percentile(mid, 0.99)
	return r, nil
}

// coldBurst sends one decision on each of coldKeys new keys from
// coldCallers callers at once and returns how long the last took to come
// back, and the errors.
func coldBurst(conns []*grpc.ClientConn, tag string) (time.Duration, uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var next atomic.Int64
	var errs atomic.Uint64
	var wg sync.WaitGroup
	start := time.Now()
	for c := range coldCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := rlsv3.NewRateLimitServiceClient(conns[c%len(conns)])
			for i := next.Add(1); i <= coldKeys; i = next.Add(1) {
				if _, err := client.ShouldRateLimit(ctx, edgeRequest("cold", tag+"-"+strconv.FormatInt(i, 10))); err != nil {
					errs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), errs.Load()
}

// windowEnds runs edgeCallers callers in a loop on edgeValues values of
// the per-second edge rule for d, and returns the latencies of the
// decisions sent in the last two round trips of a second, those of the
// others, the decisions in all, and the errors.
func windowEnds(conns []*grpc.ClientConn, tag string, rtt, d time.Duration) (edgeLat, midLat []time.Duration, _ int, _ uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	end := time.Now().Add(d)
	edge := time.Second - 2*rtt
	var mu sync.Mutex
	var lat, others []time.Duration
	var n atomic.Int64
	var errs atomic.Uint64
	var wg sync.WaitGroup
	for c := range edgeCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := rlsv3.NewRateLimitServiceClient(conns[c%len(conns)])
			req := edgeRequest("edge", tag+"-"+strconv.Itoa(c%edgeValues))
			var mine, rest []time.Duration
			for i := 0; i < 1_000_000 && time.Now().Before(end); i++ {
				t0 := time.Now()
				_, err := client.ShouldRateLimit(ctx, req)
				n.Add(1)
				if err != nil {
					errs.Add(1)
				}
				if time.Duration(t0.UnixNano())%time.Second >= edge {
					mine = append(mine, time.Since(t0))
				} else {
					rest = append(rest, time.Since(t0))
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			others = append(others, rest...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return lat, others, int(n.Load()), errs.Load()
}

func edgeRequest(key, value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}}
}

// redisCalls is the calls of one command so far (INFO commandstats).
func redisCalls(rc *goredis.Client, cmd string) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := rc.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			if j := strings.IndexByte(rest, ','); j >= 0 {
				rest = rest[:j]
			}
			n, _ := strconv.ParseUint(rest, 10, 64)
			return n
		}
	}
	return 0
}

func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

func medianDur(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
	return ds[(len(ds)-1)/2]
}

func medianFloat(fs []float64) float64 {
	sort.Float64s(fs)
	return fs[(len(fs)-1)/2]
}

func renderEdges(rows []edgeRow) string {
	var b strings.Builder
	b.WriteString("\n| store round trip | counting | 10,000 new keys, 500 callers | × exact (same round) | server CPU ms/1k (new keys) | INCRBYs/decision (new keys) | window-end p50 | window-end p99 | p99 elsewhere in the window | window-end decisions | INCRBYs/decision (full windows) | errors |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		var all []string
		for _, x := range r.coldAll {
			all = append(all, fmt.Sprintf("%.2f", x))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.2f (%s) | %s | %s | %s | %s | %s | %d | %s | %d |\n", r.rtt, r.mode, fmtDur(r.cold), r.coldRatio,
			strings.Join(all, ", "), num(r.coldCPU, 1), num(r.coldWrites, 3), fmtDur(r.endP50), fmtDur(r.endP99), fmtDur(r.midP99), r.endN, num(r.endWrites, 3), r.errors)
	}
	fmt.Fprintf(&b, "\nThe edges, each mode on a fresh process: %d decisions, one on each of %d keys never seen before, from %d callers at once "+
		"(the burst's wall time; the ratio to exact mode's burst of the same round, the median and every round's; the server's CPU per 1,000 of them); then %d callers in a loop on %d values "+
		"of a rule of %d a second, every window full: the p50 and p99 of the decisions sent in the last two store round trips of a window (issue 40: a lease "+
		"waited 1 s there), the p99 of the decisions sent elsewhere in the window (a window-end p99 near it is the loaded machine's, not the edge's), and the store writes (INCRBY calls, INFO commandstats) per decision.\n\n",
		coldKeys, coldKeys, coldCallers, edgeCallers, edgeValues, edgeLimit)
	return b.String()
}
