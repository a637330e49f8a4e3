package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// workload is what the callers send.
type workload struct {
	Callers     int
	Conns       int
	Keys        int // distinct descriptor values; 1 = one hot key
	Descriptors int // descriptors per request
	// Algo picks the rules' algorithm ("": fixed window): descriptor keys
	// k<j>, sw<j> (sliding_window) or tb<j> (token_bucket).
	Algo string
}

func (w workload) String() string {
	keys := fmt.Sprintf("%d keys", w.Keys)
	if w.Keys == 1 {
		keys = "hot key"
	}
	s := fmt.Sprintf("%d callers, %s, %d desc", w.Callers, keys, w.Descriptors)
	if w.Algo != "" {
		s += ", " + w.Algo
	}
	return s
}

// descriptorKey is the rule key of descriptor j (see rules).
func (w workload) descriptorKey(j int) string {
	switch w.Algo {
	case "sliding_window":
		return fmt.Sprintf("sw%d", j)
	case "token_bucket":
		return fmt.Sprintf("tb%d", j)
	}
	return fmt.Sprintf("k%d", j)
}

// loadResult is one measured run.
type loadResult struct {
	Decisions uint64
	Errors    uint64
	Elapsed   time.Duration
	P50, P99  time.Duration
	P999      time.Duration
	FirstErr  string
}

func (r loadResult) rate() float64 { return float64(r.Decisions) / r.Elapsed.Seconds() }

// drive runs a closed loop of w.Callers against addr for d after warmup.
// Every caller stops at the deadline; the run is bounded by it.
func drive(addr string, w workload, warmup, d time.Duration) (loadResult, error) {
	conns := make([]*grpc.ClientConn, max(1, w.Conns))
	for i := range conns {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return loadResult{}, err
		}
		defer c.Close()
		conns[i] = c
	}
	var (
		measuring atomic.Bool
		decisions atomic.Uint64
		errs      atomic.Uint64
		firstErr  atomic.Value
		mu        sync.Mutex
		lat       []time.Duration
		wg        sync.WaitGroup
	)
	// Callers stop on a flag, not a deadline: a deadline would cut the last
	// call of every caller short and count it as an error.
	var stop atomic.Bool
	ctx := context.Background()
	for i := 0; i < w.Callers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			client := rlsv3.NewRateLimitServiceClient(conns[i%len(conns)])
			rng := rand.New(rand.NewPCG(uint64(i), 42))
			local := make([]time.Duration, 0, 4096)
			req := &rlsv3.RateLimitRequest{Domain: "bench"}
			for !stop.Load() {
				req.Descriptors = req.Descriptors[:0]
				for j := 0; j < w.Descriptors; j++ {
					v := fmt.Sprint(rng.IntN(w.Keys))
					req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{
						Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: w.descriptorKey(j), Value: v}}})
				}
				start := time.Now()
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := client.ShouldRateLimit(cctx, req)
				cancel()
				el := time.Since(start)
				if !measuring.Load() {
					continue
				}
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				decisions.Add(1)
				local = append(local, el)
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}(i)
	}
	time.Sleep(warmup)
	measuring.Store(true)
	start := time.Now()
	time.Sleep(d)
	measuring.Store(false)
	elapsed := time.Since(start)
	stop.Store(true)
	wg.Wait()
	res := loadResult{Decisions: decisions.Load(), Errors: errs.Load(), Elapsed: elapsed}
	if v, ok := firstErr.Load().(string); ok {
		res.FirstErr = v
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	res.P50, res.P99, res.P999 = pct(lat, 0.50), pct(lat, 0.99), pct(lat, 0.999)
	return res, nil
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}
