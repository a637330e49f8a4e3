package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
)

// engineResult is the engine measured alone: no network, no gRPC.
type engineResult struct {
	callers   int
	decisions uint64
	elapsed   time.Duration
	allocs    float64 // per decision, the whole process (only the engine runs)
}

// benchEngine drives engine.Service over the shard actors and the memory
// backend with as many callers as cores × 8, requests built up front.
func benchEngine(d time.Duration) (engineResult, error) {
	router, err := actors.New(actors.Options{Backend: func(int) engine.Backend { return memory.New(nil) }})
	if err != nil {
		return engineResult{}, err
	}
	defer router.Close()
	o := engine.DefaultOptions()
	o.Counter = router
	svc, err := engine.NewService(o)
	if err != nil {
		return engineResult{}, err
	}
	cfg, err := svc.LoadConfig([]engine.ConfigFile{{Name: "bench.yaml", YAML: []byte(rules)}}, false)
	if err != nil {
		return engineResult{}, err
	}
	svc.SetConfig(cfg)

	const keys = 1000
	reqs := make([]*engine.Request, keys)
	for i := range reqs {
		reqs[i] = &engine.Request{Domain: "bench", Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: "k0", Value: fmt.Sprint(i)}}}}}
	}
	callers := runtime.GOMAXPROCS(0) * 8
	var (
		n    atomic.Uint64
		stop atomic.Bool
		wg   sync.WaitGroup
		ferr atomic.Value
	)
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	start := time.Now()
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			ctx := context.Background()
			for i := c; !stop.Load(); i++ {
				if _, err := svc.ShouldRateLimit(ctx, reqs[i%keys]); err != nil {
					ferr.CompareAndSwap(nil, err)
					return
				}
				n.Add(1)
			}
		}(c)
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	el := time.Since(start)
	runtime.ReadMemStats(&ms1)
	if err, ok := ferr.Load().(error); ok {
		return engineResult{}, err
	}
	dec := n.Load()
	return engineResult{callers: callers, decisions: dec, elapsed: el, allocs: float64(ms1.Mallocs-ms0.Mallocs) / float64(max(dec, 1))}, nil
}
