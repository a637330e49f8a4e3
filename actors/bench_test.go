package actors_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
)

// netBackend is the memory backend seen as a network one: its calls go to
// the lane's workers, so the benchmark measures the router's hand-offs.
type netBackend struct{ mem *memory.Backend }

func (b netBackend) Close() error { return nil }

func (b netBackend) Exec(ctx context.Context, batch []engine.CounterOp) error {
	return b.mem.Exec(ctx, batch)
}

// BenchmarkIncrementNetwork: 10 callers, each sending the operations of a
// batch of requests (ops per Increment) through one shard with a network
// lane, as the native server does for calls read together.
func BenchmarkIncrementNetwork(b *testing.B) {
	for _, ops := range []int{1, 3, 9} {
		b.Run(fmt.Sprint(ops, " ops"), func(b *testing.B) {
			mem := memory.New(nil)
			r, err := actors.New(actors.Options{Shards: 1, Backend: func(int) engine.Backend { return netBackend{mem} }})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			b.SetParallelism(5) // 10 callers on 2 cores
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				batch := make([]engine.CounterOp, ops)
				n := 0
				for pb.Next() {
					for i := range batch {
						batch[i] = engine.CounterOp{Key: fmt.Sprint("k", (n*ops+i)%1000), Hits: 1, TTL: time.Minute}
					}
					n++
					if err := r.Apply(context.Background(), batch, nil); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
