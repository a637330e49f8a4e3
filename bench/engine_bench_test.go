package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
)

// BenchmarkDecision is one ShouldRateLimit through the engine and the shard
// actors with the memory backend: go test -bench Decision -benchmem ./bench
func BenchmarkDecision(b *testing.B) {
	router, err := actors.New(actors.Options{Backend: func(int) engine.Backend { return memory.New(nil) }})
	if err != nil {
		b.Fatal(err)
	}
	defer router.Close()
	o := engine.DefaultOptions()
	o.Counter = router
	svc, err := engine.NewService(o)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := svc.LoadConfig([]engine.ConfigFile{{Name: "bench.yaml", YAML: []byte(rules)}}, false)
	if err != nil {
		b.Fatal(err)
	}
	svc.SetConfig(cfg)
	reqs := make([]*engine.Request, 1000)
	for i := range reqs {
		reqs[i] = &engine.Request{Domain: "bench", Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: "k0", Value: fmt.Sprint(i)}}}}}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		i := 0
		for pb.Next() {
			if _, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}
