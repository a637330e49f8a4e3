package main

import (
	"context"
	"fmt"
	"log"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testenv"
)

// quotaRules are the RLQS section's: one rule per user, as a proxy's
// rate_limit_quota filter would bucket requests by a user header.
const quotaRules = `domain: quota
descriptors:
  - {key: user, rate_limit: {unit: second, requests_per_unit: 1000}}
`

// quotaFleet is the RLQS section's load: envoys streams, each reporting
// every bucket in one message every interval, warm intervals before the
// measured ones.
type quotaFleet struct {
	envoys, buckets  int
	interval         time.Duration
	warm, intervals  int
	usersHot, usersN int // a user in usersN is hot when its index % usersN < usersHot
}

// quotaResult is what one run of the fleet measured.
type quotaResult struct {
	server                string // SLUICE_GRPC_SERVER
	fleet                 quotaFleet
	reports               int64 // bucket reports in the measured intervals
	actions, responses    int64 // received in the measured intervals
	elapsed               time.Duration
	serverCPU, driverCPU  float64 // seconds, in the measured intervals
	rssIdle, rssWarm, rss int64   // before any stream, after the warm intervals, at the end
	heapInuse             uint64  // the server's, at the end
	errs                  int64
	firstErr              string
	waits                 []time.Duration // sorted: subscription → every bucket answered
	reportWaits           []time.Duration // sorted: measured report → next response on its stream
	freshWaits            []time.Duration // sorted: measured report → the answer to the new bucket it carried
	reportsSent           int             // measured reports (messages), answered or not
}

// benchQuota runs sluice (memory backend) with each of its gRPC servers in
// turn and drives it with a fleet of raw RLQS streams.
func benchQuota(ctx context.Context, f flags, work string) (string, error) {
	// Envoy's global client reports every 5 s (its timer is hard-coded).
	fl := quotaFleet{envoys: 50, buckets: 1000, interval: 5 * time.Second, warm: 1, intervals: 4, usersHot: 1, usersN: 10}
	if f.quick {
		fl.intervals = 2
	}
	root := filepath.Join(work, "runtime-quota")
	if err := os.MkdirAll(filepath.Join(root, "bench", "config"), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(root, "bench", "config", "quota.yaml"), []byte(quotaRules), 0o644); err != nil {
		return "", err
	}
	var results []quotaResult
	for _, server := range []string{"native", "grpc-go"} {
		res, err := benchQuotaOn(ctx, f, work, root, server, fl)
		if err != nil {
			return "", err
		}
		results = append(results, res)
	}
	return renderQuota(results), nil
}

// benchQuotaOn is one run of the fleet on sluice's gRPC server server.
func benchQuotaOn(ctx context.Context, f flags, work, root, server string, fl quotaFleet) (quotaResult, error) {
	// Room for every Envoy's buckets and the new bucket each measured
	// report subscribes: at exactly envoys × buckets, every new bucket
	// was refused (answered at once with the blanket rule), and the
	// column measured the refusal, not a subscription.
	p, err := startSluice(f.sluice, work, root, "memory", "", "SLUICE_GRPC_SERVER="+server,
		fmt.Sprintf("SLUICE_RLQS_MAX_REPORTERS=%d", fl.envoys*(fl.buckets+fl.intervals)))
	if err != nil {
		return quotaResult{}, err
	}
	defer p.stop()
	log.Printf("rlqs: %d Envoys × %d buckets, every %v, %s server", fl.envoys, fl.buckets, fl.interval, server)
	var prof sync.WaitGroup
	if f.rlqsProfile != "" {
		// The server's CPU profile over the whole fleet run, subscription
		// included, from its debug port.
		secs := int(fl.interval.Seconds()) * (1 + fl.warm + fl.intervals)
		out := f.rlqsProfile + "-" + server + ".pprof"
		prof.Go(func() {
			if err := testenv.SaveURL(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.debug, secs), out); err != nil {
				log.Printf("rlqs: profile: %v", err)
			}
		})
	}
	res, err := driveQuota(ctx, p, fl)
	prof.Wait()
	res.server = server
	return res, err
}

// quotaEnvoy is one simulated proxy: its stream, the message it reports
// (built once, its counts rewritten every interval), its demand and the
// rate it was last assigned per bucket.
type quotaEnvoy struct {
	stream grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]
	msg    *rlqsv3.RateLimitQuotaUsageReports
	demand []float64
	index  map[string]int // user → bucket
	mu     sync.Mutex
	rate   []float64 // negative: no assignment (allow all)
	// sent is when the subscribing report went (unix ns); got marks the
	// buckets answered since, ngot counts them; waits holds the delay
	// until every bucket was answered.
	sent  int64
	got   []bool
	ngot  int
	waits []time.Duration
	// sentReport is when the last measured report went (unix ns, 0 once
	// a response came after it); reportWaits the delays to that response.
	sentReport  int64
	reportWaits []time.Duration
	// Every measured report also subscribes one new bucket (fresh, named
	// freshName, sent at freshSent), which the server must answer: the
	// delay to that answer is the report's own, whatever the others need.
	fresh      *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage
	freshName  string
	freshSent  int64
	freshWaits []time.Duration
	// freshBlanket counts new buckets answered with a blanket rule: the
	// rule is a token bucket, so that is a refusal (a cap), not a share.
	freshBlanket int
}

// fill rewrites the message's counts for one interval: the demand, and
// what of it the assignment let through.
func (e *quotaEnvoy) fill(first bool, interval time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k := range e.demand {
		u := e.msg.BucketQuotaUsages[k]
		if first {
			u.TimeElapsed, u.NumRequestsAllowed, u.NumRequestsDenied = durationpb.New(0), 1, 0
			continue
		}
		want := math.Round(e.demand[k] * interval.Seconds())
		ok := want
		if r := e.rate[k]; r >= 0 {
			ok = min(want, math.Round(r*interval.Seconds()))
		}
		u.TimeElapsed = durationpb.New(interval)
		u.NumRequestsAllowed, u.NumRequestsDenied = uint64(ok), uint64(want-ok)
	}
}

// withNew makes the message subscribe one new bucket, name, besides its
// buckets, sent at (unix ns); under e.mu.
func (e *quotaEnvoy) withNew(name string, at int64) {
	if e.fresh == nil {
		e.fresh = &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{TimeElapsed: durationpb.New(0), NumRequestsAllowed: 1}
		e.msg.BucketQuotaUsages = append(e.msg.BucketQuotaUsages, e.fresh)
	}
	e.freshName, e.freshSent = name, at
	e.fresh.BucketId = &rlqsv3.BucketId{Bucket: map[string]string{"user": name}}
}

// receive applies the stream's actions until it ends.
func (e *quotaEnvoy) receive(actions, responses *atomic.Int64) {
	for {
		resp, err := e.stream.Recv()
		if err != nil {
			return
		}
		responses.Add(1)
		actions.Add(int64(len(resp.GetBucketAction())))
		now := time.Now().UnixNano()
		e.mu.Lock()
		if e.freshSent > 0 {
			for _, a := range resp.GetBucketAction() {
				if a.GetBucketId().GetBucket()["user"] == e.freshName {
					if a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() == nil {
						e.freshBlanket++
					}
					e.freshWaits = append(e.freshWaits, time.Duration(now-e.freshSent))
					e.freshSent = 0
					break
				}
			}
		}
		if e.sentReport > 0 {
			e.reportWaits = append(e.reportWaits, time.Duration(now-e.sentReport))
			e.sentReport = 0
		}
		for _, a := range resp.GetBucketAction() {
			k, ok := e.index[a.GetBucketId().GetBucket()["user"]]
			if !ok {
				continue
			}
			if e.sent > 0 && !e.got[k] {
				e.got[k] = true
				if e.ngot++; e.ngot == len(e.got) {
					e.waits = append(e.waits, time.Duration(now-e.sent))
				}
			}
			e.rate[k] = -1
			if tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket(); tb != nil {
				if fi := tb.GetFillInterval().AsDuration(); fi > 0 {
					e.rate[k] = float64(tb.GetTokensPerFill().GetValue()) / fi.Seconds()
				}
			} else if a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL {
				e.rate[k] = 0
			}
		}
		e.mu.Unlock()
	}
}

// openQuota opens one connection and stream per Envoy and builds its
// message. Of a user's demand (a tenth of the users ask twice the limit in
// all, the others 100–400/s), Envoy i has 1 + i%5 parts of 3 × envoys.
func openQuota(ctx context.Context, addr string, fl quotaFleet) ([]*grpc.ClientConn, []*quotaEnvoy, error) {
	index := make(map[string]int, fl.buckets)
	total := make([]float64, fl.buckets)
	for k := range fl.buckets {
		index[fmt.Sprintf("u%d", k)] = k
		total[k] = 100 + float64(k%7)*50
		if k%fl.usersN < fl.usersHot {
			total[k] = 2000
		}
	}
	weights := 0.0
	for i := range fl.envoys {
		weights += float64(1 + i%5)
	}
	var conns []*grpc.ClientConn
	var envoys []*quotaEnvoy
	for i := range fl.envoys {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return conns, envoys, err
		}
		conns = append(conns, c)
		st, err := rlqsv3.NewRateLimitQuotaServiceClient(c).StreamRateLimitQuotas(ctx)
		if err != nil {
			return conns, envoys, err
		}
		e := &quotaEnvoy{stream: st, msg: &rlqsv3.RateLimitQuotaUsageReports{Domain: "quota"},
			demand: make([]float64, fl.buckets), index: index, rate: make([]float64, fl.buckets)}
		for k := range fl.buckets {
			e.msg.BucketQuotaUsages = append(e.msg.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
				BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"user": fmt.Sprintf("u%d", k)}}})
			e.demand[k] = total[k] * float64(1+i%5) / weights
			e.rate[k] = -1
		}
		envoys = append(envoys, e)
	}
	return conns, envoys, nil
}

// quotaSnap is what is read at the edges of the measured intervals.
type quotaSnap struct {
	at                 time.Time
	server, driver     float64
	actions, responses int64
}

func driverCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// driveQuota plays the fleet against p: each Envoy reports every bucket
// once per interval, the Envoys spread evenly over it, the first report a
// subscription. Every loop is bounded by the intervals.
func driveQuota(ctx context.Context, p *process, fl quotaFleet) (quotaResult, error) {
	res := quotaResult{fleet: fl}
	res.rssIdle, _ = testenv.RSS(p.pid())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conns, envoys, err := openQuota(ctx, p.addr, fl)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if err != nil {
		return res, err
	}
	var actions, responses atomic.Int64
	var wg sync.WaitGroup
	for _, e := range envoys {
		wg.Add(1)
		go func() { defer wg.Done(); e.receive(&actions, &responses) }()
	}
	defer wg.Wait()
	defer cancel()
	snap := func() quotaSnap {
		cpu, _ := testenv.CPUSeconds(p.pid())
		return quotaSnap{at: time.Now(), server: cpu, driver: driverCPU(), actions: actions.Load(), responses: responses.Load()}
	}
	start := time.Now()
	var s0 quotaSnap
	for iv := range fl.warm + fl.intervals {
		if iv == fl.warm {
			s0 = snap()
			res.rssWarm, _ = testenv.RSS(p.pid())
		}
		for i, e := range envoys {
			at := start.Add(fl.interval*time.Duration(iv) + fl.interval*time.Duration(i)/time.Duration(fl.envoys))
			if err := sleepUntil(ctx, at); err != nil {
				return res, err
			}
			e.fill(iv == 0, fl.interval)
			e.mu.Lock()
			switch {
			case iv == 0:
				e.sent = time.Now().UnixNano()
				e.got = make([]bool, fl.buckets)
			case iv >= fl.warm:
				// A report not answered before this one is left out:
				// nothing in it needed an answer.
				e.sentReport = time.Now().UnixNano()
				res.reportsSent++
				e.withNew(fmt.Sprintf("new%d-%d", i, iv), e.sentReport)
			}
			e.mu.Unlock()
			if err := e.stream.Send(e.msg); err != nil {
				if res.errs++; res.firstErr == "" {
					res.firstErr = err.Error()
				}
			} else if iv >= fl.warm {
				res.reports += int64(fl.buckets)
			}
		}
	}
	if err := sleepUntil(ctx, start.Add(fl.interval*time.Duration(fl.warm+fl.intervals))); err != nil {
		return res, err
	}
	s1 := snap()
	res.elapsed, res.serverCPU, res.driverCPU = s1.at.Sub(s0.at), s1.server-s0.server, s1.driver-s0.driver
	res.actions, res.responses = s1.actions-s0.actions, s1.responses-s0.responses
	res.rss, _ = testenv.RSS(p.pid())
	if ms, err := memStats(p.debug); err == nil {
		res.heapInuse = ms.HeapInuse
	}
	res.waits = answerWaits(envoys, func(e *quotaEnvoy) []time.Duration { return e.waits })
	res.reportWaits = answerWaits(envoys, func(e *quotaEnvoy) []time.Duration { return e.reportWaits })
	res.freshWaits = answerWaits(envoys, func(e *quotaEnvoy) []time.Duration { return e.freshWaits })
	res.countRefused(envoys)
	return res, nil
}

// countRefused counts the new buckets answered with a blanket rule as
// errors: the rule is a token bucket, so each was refused (a cap).
func (res *quotaResult) countRefused(envoys []*quotaEnvoy) {
	blanket := 0
	for _, e := range envoys {
		e.mu.Lock()
		blanket += e.freshBlanket
		e.mu.Unlock()
	}
	if blanket > 0 {
		res.errs += int64(blanket)
		if res.firstErr == "" {
			res.firstErr = fmt.Sprintf("%d new buckets answered with a blanket rule (refused), not a token bucket share", blanket)
		}
	}
}

// answerWaits are the fleet's delays of one kind (which), sorted.
func answerWaits(envoys []*quotaEnvoy, which func(*quotaEnvoy) []time.Duration) []time.Duration {
	var all []time.Duration
	for _, e := range envoys {
		e.mu.Lock()
		all = append(all, which(e)...)
		e.mu.Unlock()
	}
	slices.Sort(all)
	return all
}

func sleepUntil(ctx context.Context, at time.Time) error {
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func renderQuota(rs []quotaResult) string {
	var b strings.Builder
	fl := rs[0].fleet
	entries := float64(fl.envoys * fl.buckets)
	mb := func(n int64) string { return fmt.Sprintf("%.0f MB", float64(n)/(1<<20)) }
	b.WriteString("### Quota service (RLQS): many Envoys, many buckets\n\n")
	b.WriteString("| gRPC server | Envoys × buckets | reporting interval | measured | bucket reports | server CPU ms/1k reports | server CPU, cores | actions/1k reports | subscription → every bucket answered p50 / p99 | report → answer p50 / p99 (reports answered) | report → its new bucket answered p50 / p99 (of reports) | server RSS: idle → warm → end | RSS per reporter | server heap in use | driver CPU ms/1k reports | errors |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|\n")
	for _, r := range rs {
		k := float64(max(r.reports, 1)) / 1000
		fmt.Fprintf(&b, "| %s | %d × %d | %v | %s | %d | %.1f | %.2f | %.0f | %s / %s | %s / %s (%d of %d) | %s / %s (%d of %d) | %s → %s → %s | %.0f B | %s | %.1f | %d |\n",
			r.server, fl.envoys, fl.buckets, fl.interval, fmtDur(r.elapsed), r.reports, r.serverCPU*1000/k, r.serverCPU/r.elapsed.Seconds(),
			float64(r.actions)/k, fmtDur(testenv.Percentile(r.waits, 0.5)), fmtDur(testenv.Percentile(r.waits, 0.99)),
			fmtDur(testenv.Percentile(r.reportWaits, 0.5)), fmtDur(testenv.Percentile(r.reportWaits, 0.99)), len(r.reportWaits), r.reportsSent,
			fmtDur(testenv.Percentile(r.freshWaits, 0.5)), fmtDur(testenv.Percentile(r.freshWaits, 0.99)), len(r.freshWaits), r.reportsSent, mb(r.rssIdle), mb(r.rssWarm), mb(r.rss), float64(r.rss-r.rssIdle)/entries,
			mb(int64(r.heapInuse)), r.driverCPU*1000/k, r.errs)
	}
	for _, r := range rs {
		if r.firstErr != "" {
			fmt.Fprintf(&b, "\nFirst error (%s): %s\n", r.server, r.firstErr)
		}
	}
	fmt.Fprintf(&b, "\nOne sluice (memory backend; its native gRPC server, then grpc-go's) and %d raw RLQS streams, one connection each, "+
		"reporting the same %d buckets ({user: u<k>}, a rule of 1,000/s per user) in one message every %v, the Envoys spread evenly over the interval. "+
		"A tenth of the users ask twice their limit, the others 10–40 %% of it, unevenly over the Envoys; each Envoy reports as allowed what its last assignment lets through. "+
		"The first interval subscribes every bucket; %d warm intervals, then %d measured. "+
		"Server CPU (from /proc) covers the measured intervals: reading the reports, the shards that divide each rule and reserve on the store, and writing the actions. "+
		"Subscription → every bucket answered is the delay from an Envoy's first report (every bucket new) to the response that answered its last bucket (one per Envoy, all Envoys subscribing within one interval); later reports are answered only when an assignment changes or is renewed. "+
		"Report → answer is the delay from a measured report to the next response on its stream, counted for the reports answered before their stream's next report (a response sent for another reason, a renewal, also counts; and a report that needed no answer waits for the next renewal, up to a quarter of the report period). "+
		"So every measured report also subscribes one new bucket, which must be answered: report → its new bucket answered is the delay to that answer, the report's own latency through the server, whatever the rest of the report needed. "+
		"RSS per reporter is (end − idle) ÷ (Envoys × buckets). Driver CPU is this program's own, building, sending and reading the messages.\n\n",
		fl.envoys, fl.buckets, fl.interval, fl.warm, fl.intervals)
	return b.String()
}
