package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/testenv"
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
	// DriverMs is the CPU this process (the load driver) spent per 1,000
	// calls in the measured window: what the driver takes from the machine
	// it shares with the server.
	DriverMs float64
}

func (r loadResult) rate() float64 { return float64(r.Decisions) / r.Elapsed.Seconds() }

// driveGrace is how long a run waits for the calls in flight at its end
// before it ends them by closing the connections.
var driveGrace = 10 * time.Second

// requestsPerCaller is how many distinct requests a caller cycles through;
// they are built before the run so the driver spends its CPU on calls only.
const requestsPerCaller = 256

// requests builds the requests of caller i: descriptor values spread over
// w.Keys, a different stretch for every caller.
func requests(w workload, i int) []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, requestsPerCaller)
	for n := range reqs {
		r := &rlsv3.RateLimitRequest{Domain: "bench"}
		for d := 0; d < w.Descriptors; d++ {
			// Spread with primes so callers and descriptors hit different keys.
			v := (i*7919 + n*104729 + d*15485863) % w.Keys
			r.Descriptors = append(r.Descriptors, &ratelimitv3.RateLimitDescriptor{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: w.descriptorKey(d), Value: strconv.Itoa(v)}}})
		}
		reqs[n] = r
	}
	return reqs
}

// driveFunc runs a closed loop of w.Callers against addrs for d after warmup.
type driveFunc func(addrs []string, w workload, warmup, d time.Duration) (loadResult, error)

// driverNamed is the -driver flag's load driver.
func driverNamed(name string) (driveFunc, error) {
	switch name {
	case "grpc":
		return drive, nil
	case "h2":
		return driveH2, nil
	}
	return nil, fmt.Errorf("-driver %q: want grpc or h2", name)
}

// measureWindow lets the callers warm up, then moves phase to 1 (measuring)
// for d and to 2 (stop). It returns the window's length and the CPU seconds
// this process, the driver, spent in it.
func measureWindow(phase *atomic.Int32, warmup, d time.Duration) (time.Duration, float64) {
	time.Sleep(warmup)
	cpu0, _ := testenv.CPUSeconds(os.Getpid())
	phase.Store(1)
	start := time.Now()
	time.Sleep(d)
	phase.Store(2)
	elapsed := time.Since(start)
	cpu1, _ := testenv.CPUSeconds(os.Getpid())
	return elapsed, cpu1 - cpu0
}

// drive runs a closed loop of w.Callers against addrs (connection i to
// addrs[i % len(addrs)]) for d after warmup: few
// connections, requests built up front, no per-call timers, so that the
// driver stays light and the figures are the server's. Every caller stops at
// the end of the run; a call that hangs is ended by closing the connections
// after a grace period, so the run is bounded.
func drive(addrs []string, w workload, warmup, d time.Duration) (loadResult, error) {
	conns := make([]*grpc.ClientConn, max(1, w.Conns))
	for i := range conns {
		c, err := grpc.NewClient(addrs[i%len(addrs)], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return loadResult{}, err
		}
		defer c.Close()
		conns[i] = c
	}
	var (
		phase    atomic.Int32 // 0 warmup, 1 measuring, 2 stop
		errs     atomic.Uint64
		firstErr atomic.Value
		mu       sync.Mutex
		lat      []time.Duration
		wg       sync.WaitGroup
	)
	capacity := sampleCapacity(w, d)
	for i := 0; i < w.Callers; i++ {
		reqs := requests(w, i)
		client := rlsv3.NewRateLimitServiceClient(conns[i%len(conns)])
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, capacity)
			for n := 0; ; n++ {
				p := phase.Load()
				if p == 2 {
					break
				}
				start := time.Now()
				_, err := client.ShouldRateLimit(context.Background(), reqs[n%len(reqs)])
				if p == 0 || phase.Load() != 1 {
					continue // only calls that start and end in the window count
				}
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				local = append(local, time.Since(start))
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	elapsed, cpu := measureWindow(&phase, warmup, d)
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(driveGrace):
		// A server that stopped answering must not hang the bench: closing
		// the connections ends the calls in flight.
		for _, c := range conns {
			c.Close()
		}
		<-stopped
	}
	first, _ := firstErr.Load().(string)
	return newLoadResult(lat, errs.Load(), first, elapsed, cpu), nil
}

// sampleCapacity is how many latency samples a caller keeps at most: enough
// for p99.9 at any rate this machine reaches, bounded in memory.
func sampleCapacity(w workload, d time.Duration) int {
	return int(min(d.Seconds()*200_000/float64(max(w.Callers, 1))+1024, 1<<20))
}

// newLoadResult sums up a run: its successful calls' latencies (sorted
// here), its failed calls, the measured window and the driver's CPU seconds.
func newLoadResult(lat []time.Duration, errs uint64, firstErr string, elapsed time.Duration, cpu float64) loadResult {
	res := loadResult{Decisions: uint64(len(lat)), Errors: errs, FirstErr: firstErr, Elapsed: elapsed}
	res.DriverMs = cpu * 1000 / float64(max(res.Decisions+res.Errors, 1)) * 1000
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	res.P50, res.P99, res.P999 = testenv.Percentile(lat, 0.50), testenv.Percentile(lat, 0.99), testenv.Percentile(lat, 0.999)
	return res
}
