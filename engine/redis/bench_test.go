package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testenv"
)

// BenchmarkExec measures one pipelined Exec against a
// local redis-server, by batch size. keys/s is the figure to compare.
func BenchmarkExec(b *testing.B) {
	r := testenv.StartRedis(b, testenv.RedisOptions{})
	be := newBackend(b, singleOptions(r))
	ctx := context.Background()
	for _, n := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			batch := make([]engine.CounterOp, n)
			for i := range batch {
				batch[i] = engine.CounterOp{Key: fmt.Sprintf("bench_%d_%d", n, i), Hits: 1, TTL: time.Minute}
			}
			b.ReportAllocs()
			calls := 0
			for b.Loop() {
				if err := be.Exec(ctx, batch); err != nil {
					b.Fatal(err)
				}
				calls++
			}
			b.ReportMetric(float64(calls*n)/b.Elapsed().Seconds(), "keys/s")
		})
	}
}
