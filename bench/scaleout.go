package main

import (
	"context"
	"fmt"
	"log"
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

// scaleRow is one scale-out topology: throughput of the replicas together,
// and whether they handed out exactly the limit between them.
type scaleRow struct {
	topology string
	w        workload
	res      loadResult
	cpuMs    float64 // all replicas + all Redis nodes, per 1,000 decisions
	exactOK  int64   // OK answers of exactTotal decisions on a limit of exactLimit
	exactErr int64
}

const exactTotal, exactLimit = 20000, 10000

// scaleOut runs sluice replicas that share their counters: two on one Redis,
// three on a 3-primary Redis Cluster.
func scaleOut(ctx context.Context, tb *testenv.ProgramTB, bin, work, runtimeRoot string, warmup, d time.Duration, driveFn driveFunc) ([]scaleRow, error) {
	var rows []scaleRow
	for _, tp := range []struct {
		name     string
		replicas int
		redis    func() (urls []string, env []string, err error)
	}{
		{"2 sluice replicas, one Redis", 2, func() ([]string, []string, error) {
			r := testenv.StartRedis(tb, testenv.RedisOptions{})
			return []string{r.Addr}, nil, tb.Err()
		}},
		{"3 sluice replicas, 3-primary Redis Cluster", 3, func() ([]string, []string, error) {
			c := testenv.StartRedisCluster(tb, 3)
			if err := tb.Err(); err != nil {
				return nil, nil, err
			}
			return c.Addrs, []string{"REDIS_TYPE=cluster"}, nil
		}},
	} {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		log.Printf("scale-out: %s", tp.name)
		urls, env, err := tp.redis()
		if err != nil {
			return nil, err
		}
		row, err := scaleOutOne(tp.name, tp.replicas, bin, work, runtimeRoot, urls, env, warmup, d, driveFn)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func scaleOutOne(name string, replicas int, bin, work, runtimeRoot string, redisAddrs, env []string, warmup, d time.Duration, driveFn driveFunc) (scaleRow, error) {
	var procs []*process
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	var addrs []string
	for i := 0; i < replicas; i++ {
		p, err := startSluice(bin, work, runtimeRoot, "redis", strings.Join(redisAddrs, ","), env...)
		if err != nil {
			return scaleRow{}, err
		}
		procs = append(procs, p)
		addrs = append(addrs, p.addr)
	}
	pids := make([]int, 0, len(procs)+len(redisAddrs))
	for _, p := range procs {
		pids = append(pids, p.pid())
	}
	for _, a := range redisAddrs {
		rc := goredis.NewClient(&goredis.Options{Addr: a})
		pids = append(pids, redisProcessID(rc))
		rc.Close()
	}
	w := workload{Callers: 200, Conns: 2 * replicas, Keys: 1000, Descriptors: 1}
	var cpu0 float64
	timer := time.AfterFunc(warmup, func() { cpu0 = cpuOf(pids) })
	res, err := driveFn(addrs, w, warmup, d)
	timer.Stop()
	if err != nil {
		return scaleRow{}, err
	}
	row := scaleRow{topology: name, w: w, res: res}
	row.cpuMs = (cpuOf(pids) - cpu0) * 1000 / float64(max(res.Decisions, 1)) * 1000
	row.exactOK, row.exactErr, err = exactAcross(addrs, fmt.Sprintf("%s-%d", strings.Fields(name)[0], time.Now().UnixNano()))
	return row, err
}

func cpuOf(pids []int) float64 {
	var sum float64
	for _, pid := range pids {
		c, _ := testenv.CPUSeconds(pid)
		sum += c
	}
	return sum
}

// exactAcross sends exactTotal concurrent decisions for one fresh key with a
// limit of exactLimit, spread over the replicas, and counts the OK answers.
func exactAcross(addrs []string, value string) (ok, failed int64, err error) {
	conns := make([]*grpc.ClientConn, len(addrs))
	for i, a := range addrs {
		c, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return 0, 0, err
		}
		defer c.Close()
		conns[i] = c
	}
	req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "exact", Value: value}}}}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const callers = 400
	var next, okN, failN atomic.Int64
	var wg sync.WaitGroup
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			client := rlsv3.NewRateLimitServiceClient(conns[c%len(conns)])
			for next.Add(1) <= exactTotal {
				resp, err := client.ShouldRateLimit(ctx, req)
				switch {
				case err != nil:
					failN.Add(1)
				case resp.OverallCode == rlsv3.RateLimitResponse_OK:
					okN.Add(1)
				}
			}
		}(c)
	}
	wg.Wait()
	return okN.Load(), failN.Load(), nil
}

func renderScaleOut(rows []scaleRow) string {
	var b strings.Builder
	b.WriteString("### Scale-out: replicas sharing their counters\n\n")
	b.WriteString("| topology | workload | decisions/s | p50 | p99 | errors | replicas + Redis CPU ms/1k | exactness: OK of 20,000 on a limit of 10,000 |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		verdict := "exact"
		if r.exactOK != exactLimit || r.exactErr != 0 {
			verdict = "NOT EXACT"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d | %s | %d (%d errors): %s |\n",
			r.topology, r.w, fmtRate(r.res.rate()), fmtDur(r.res.P50), fmtDur(r.res.P99), r.res.Errors,
			num(r.cpuMs, 1), r.exactOK, r.exactErr, verdict)
	}
	b.WriteString("\nThe callers' connections are spread evenly over the replicas; exactness sends 20,000 concurrent decisions " +
		"for one fresh key from 400 callers over all replicas. `go test ./server -run TestExactnessAcrossReplicas` pins the same promise.\n\n")
	return b.String()
}
