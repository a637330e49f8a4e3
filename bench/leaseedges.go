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

// coldPairs is how many bursts of new keys each round sends to each mode,
// in turns, the two processes side by side: one burst's wall time varies
// by ±20 % from run to run on this machine, so a ratio is judged over many
// pairs, each of two bursts sent one right after the other.
const coldPairs = 4

// edgeRow is one counting mode's figures with the store at one distance,
// the medians of the rounds.
type edgeRow struct {
	rtt  time.Duration
	mode string
	// cold is the median burst's wall time; coldRatios every pair's ratio
	// to exact mode's burst next to it (nil for exact).
	cold       time.Duration
	coldRatios []float64
	coldWrites float64 // INCRBYs per decision in the bursts
	// coldCPU is the server's CPU ms per 1,000 decisions of the bursts
	// (their cost, which a loaded machine's scheduling moves less than
	// wall time).
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

// edgeRound is one round's measurement of one mode.
type edgeRound struct {
	colds                 []time.Duration // each burst's
	coldWrites, endWrites float64
	coldCPU               float64
	endP99                time.Duration
	endP50, midP99        time.Duration
	endN                  int
	errors                uint64
}

// edgeModes are the counting modes compared, exact first: every ratio is
// to it.
var edgeModes = []string{"exact", "lease"}

// leaseEdges measures exact and lease counting on the store behind far,
// f.rounds times (each on a fresh process of each mode), and returns their
// rows, exact first.
func leaseEdges(f flags, work, runtimeRoot, far string, rc *goredis.Client, rtt, d time.Duration) ([]edgeRow, error) {
	rounds := make([][]edgeRound, len(edgeModes))
	for round := 0; round < f.rounds; round++ {
		log.Printf("lease edges: store %v away, round %d", rtt, round+1)
		rs, err := edgeRoundOf(f, work, runtimeRoot, far, rc, fmt.Sprintf("%d-%d", rtt.Milliseconds(), round), rtt, d)
		if err != nil {
			return nil, err
		}
		for i := range edgeModes {
			rounds[i] = append(rounds[i], rs[i])
		}
	}
	out := make([]edgeRow, len(edgeModes))
	for i, mode := range edgeModes {
		row := edgeRow{rtt: rtt, mode: mode}
		var colds, p99s, p50s, mids []time.Duration
		var cw, ew, cc []float64
		for k, r := range rounds[i] {
			colds = append(colds, r.colds...)
			p99s = append(p99s, r.endP99)
			p50s = append(p50s, r.endP50)
			mids = append(mids, r.midP99)
			cw = append(cw, r.coldWrites)
			cc = append(cc, r.coldCPU)
			ew = append(ew, r.endWrites)
			if i > 0 {
				for j, c := range r.colds {
					row.coldRatios = append(row.coldRatios, c.Seconds()/rounds[0][k].colds[j].Seconds())
				}
			}
			row.endN += r.endN
			row.errors += r.errors
		}
		row.cold, row.endP99 = medianDur(colds), medianDur(p99s)
		row.endP50, row.midP99 = medianDur(p50s), medianDur(mids)
		row.coldWrites, row.endWrites = medianFloat(cw), medianFloat(ew)
		row.coldCPU = medianFloat(cc)
		out[i] = row
	}
	return out, nil
}

// edgeRoundOf starts a process of each mode on the store behind far, sends
// them coldPairs bursts each in turns (which goes first alternates), then
// runs the window-end run on each in turn, and stops them.
func edgeRoundOf(f flags, work, runtimeRoot, far string, rc *goredis.Client, tag string, rtt, d time.Duration) ([]edgeRound, error) {
	ps := make([]*process, len(edgeModes))
	conns := make([][]*grpc.ClientConn, len(edgeModes))
	defer func() {
		for i, p := range ps {
			for _, c := range conns[i] {
				c.Close()
			}
			if p != nil {
				p.stop()
			}
		}
	}()
	for i, mode := range edgeModes {
		p, err := startSluice(f.sluice, work, runtimeRoot, "redis", far, "SLUICE_COUNTING="+mode)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", mode, err)
		}
		ps[i] = p
		for range edgeConns {
			c, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", mode, err)
			}
			conns[i] = append(conns[i], c)
		}
	}
	out := make([]edgeRound, len(edgeModes))
	cpu := make([]float64, len(edgeModes))
	writes := make([]uint64, len(edgeModes))
	for pair := range coldPairs {
		for k := range edgeModes {
			i := (pair + k) % len(edgeModes)
			w0 := redisCalls(rc, "incrby")
			cpu0, _ := testenv.CPUSeconds(ps[i].pid())
			took, errs := coldBurst(conns[i], fmt.Sprintf("%s-%s-%d", edgeModes[i], tag, pair))
			cpu1, _ := testenv.CPUSeconds(ps[i].pid())
			out[i].colds = append(out[i].colds, took)
			out[i].errors += errs
			cpu[i] += cpu1 - cpu0
			writes[i] += redisCalls(rc, "incrby") - w0
		}
	}
	for i := range edgeModes {
		r := &out[i]
		r.coldCPU = cpu[i] * 1000 / (coldPairs * coldKeys) * 1000
		r.coldWrites = float64(writes[i]) / (coldPairs * coldKeys)
		// The window-end run starts at a window's start, so that every
		// window it measures is whole.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		w0 := redisCalls(rc, "incrby")
		lat, mid, n, errs := windowEnds(conns[i], edgeModes[i]+"-"+tag, rtt, d)
		r.endWrites = float64(redisCalls(rc, "incrby")-w0) / float64(max(n, 1))
		r.errors += errs
		r.endN = len(lat)
		r.endP99, r.endP50 = percentile(lat, 0.99), percentile(lat, 0.5)
		r.midP99 = percentile(mid, 0.99)
	}
	return out, nil
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
	b.WriteString("\n| store round trip | counting | 10,000 new keys, 500 callers | × exact (pairs: median, range) | server CPU ms/1k (new keys) | INCRBYs/decision (new keys) | window-end p50 | window-end p99 | p99 elsewhere in the window | window-end decisions | INCRBYs/decision (full windows) | errors |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		ratio := "1.00"
		if n := len(r.coldRatios); n > 0 {
			rs := append([]float64(nil), r.coldRatios...)
			sort.Float64s(rs)
			ratio = fmt.Sprintf("%.2f (%.2f–%.2f, %d pairs)", medianFloat(rs), rs[0], rs[n-1], n)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %s | %d |\n", r.rtt, r.mode, fmtDur(r.cold), ratio,
			num(r.coldCPU, 1), num(r.coldWrites, 3), fmtDur(r.endP50), fmtDur(r.endP99), fmtDur(r.midP99), r.endN, num(r.endWrites, 3), r.errors)
	}
	fmt.Fprintf(&b, "\nThe edges, a fresh process of each mode side by side every round: %d bursts to each, in turns (which goes first alternates), "+
		"each %d decisions, one on each of %d keys never seen before, from %d callers at once "+
		"(the median burst's wall time; the ratio of each lease burst to the exact burst next to it, their median and range; the server's CPU per 1,000 of them); then, on each in turn, %d callers in a loop on %d values "+
		"of a rule of %d a second, every window full: the p50 and p99 of the decisions sent in the last two store round trips of a window (issue 40: a lease "+
		"waited 1 s there), the p99 of the decisions sent elsewhere in the window (a window-end p99 near it is the loaded machine's, not the edge's), and the store writes (INCRBY calls, INFO commandstats) per decision.\n\n",
		coldPairs, coldKeys, coldKeys, coldCallers, edgeCallers, edgeValues, edgeLimit)
	return b.String()
}
